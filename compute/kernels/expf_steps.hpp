// The C library's expf, as constants: what the vector kernels that repeat it step for step share
// (avx512_exp.cpp, avx2_exp.cpp; kernels.hpp `exp_weights`). glibc (2.27 on, its FMA build)
// computes expf in double: k = round(x * 32/ln2) by adding 1.5 * 2^52 (one FMA), r = x * 32/ln2 - k
// (a second FMA), 2^(k/32) from the 32-entry table below with k/32's integer part added to the
// exponent bits, times a cubic in r, rounded once to float; |x| >= 88, NaN and the infinities take
// other branches (kFastTop). Whether the running C library does the same is each kernel's start-up
// probe's question.
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iterator>

namespace waste::kernels::detail::expf_steps {

// 2^(i/32) rounded to the nearest double, less i << 47 in its bits: adding k << 47 for
// k = 32 q + i then gives 2^(q + i/32).
constexpr std::array<std::uint64_t, 32> kExp2Table{
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};
constexpr double kInvLn2N = 0x1.71547652b82fep+5;  // 32 / ln 2
constexpr double kShift = 0x1.8p+52;               // rounds to an integer in the low bits
constexpr double kC0 = 0x1.c6af84b912394p-20;      // the cubic's coefficients (in r = x * 32/ln2 - k)
constexpr double kC1 = 0x1.ebfce50fac4f3p-13;
constexpr double kC2 = 0x1.62e42ff0c52d6p-6;
// The top 12 bits of |x| (as float bits >> 20, sign dropped) above this: |x| >= 88, NaN or
// infinite, another branch of the library's expf.
constexpr std::uint32_t kFastTop = 0x42a;

// sum_exp's exp (not the library's; within a bound): r = x - k ln2 with ln 2 in two parts (k * kLn2Hi
// exact for |k| < 2^11), exp(r) by its Taylor polynomial to degree 13 (truncation below 5e-18
// relative on |r| <= ln2 / 2), highest coefficient first.
constexpr double kLog2e = 0x1.71547652b82fep+0;
constexpr double kLn2Hi = 0x1.62e42fefa3800p-1;
constexpr double kLn2Lo = 0x1.ef35793c76730p-45;
constexpr std::array<double, 14> kInverseFactorials{
    1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
    1.0 / 40320.0,      1.0 / 5040.0,      1.0 / 720.0,      1.0 / 120.0,     1.0 / 24.0,
    1.0 / 6.0,          0.5,               1.0,              1.0};

// Whether `exp_weights` (x, n, sub, div, y) gives std::exp's bits on probes across the range
// sampling sees (4,080 inputs evenly spaced in float bits from -0 to -104: every binade of
// negative inputs), the fast branch's edges and the other branches.
template <class ExpWeights>
bool agrees_with_libm(ExpWeights exp_weights) {
  constexpr std::size_t kSpread = 4080;
  std::array<float, kSpread + 16> probe{};
  for (std::size_t i = 0; i < kSpread; ++i) {
    probe[i] = std::bit_cast<float>(std::uint32_t(0x80000000u + i * (0x42d00000u / kSpread)));
  }
  const float edges[] = {0.0f, 1.0f, -87.99999f, -88.0f, -88.00001f, -103.27893f, -103.97208f, -104.0f, -1e30f,
                         -HUGE_VALF, HUGE_VALF, std::nanf(""), 3.0f, 88.5f, -1e-30f, -0x1p-149f};
  for (std::size_t i = 0; i < std::size(edges); ++i) probe[kSpread + i] = edges[i];
  std::array<float, kSpread + 16> got{};
  exp_weights(probe.data(), int(probe.size()), 0.0f, 1.0f, got.data());
  for (std::size_t i = 0; i < probe.size(); ++i) {
    const float want = std::exp(probe[i]);
    if (std::bit_cast<std::uint32_t>(want) != std::bit_cast<std::uint32_t>(got[i]) &&
        !(std::isnan(want) && std::isnan(got[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace waste::kernels::detail::expf_steps

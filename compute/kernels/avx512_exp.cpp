// Exponentials over a vocabulary row (kernels.hpp `exp_weights`, `sum_exp`), 16 floats a step.
//
// exp_weights gives the C library's expf bit for bit. glibc (2.27 on, the FMA build it runs on
// every CPU this table is chosen for) computes expf in double: k = round(x * 32/ln2) by adding
// 1.5 * 2^52, r = x * 32/ln2 - k (both one FMA), 2^(k/32) from a 32-entry table of 2^(i/32) with
// k/32's integer part added to the exponent bits, times a cubic in r, rounded once to float;
// |x| >= 88 (and NaN, infinities) take other branches. This file repeats those steps in double
// lanes with the same constants and the same FMAs, and hands every lane of the other branches to
// std::exp. Whether the running C library does the same is checked once (`exp_matches_libm`): the
// table takes the kernel only where it agrees on probes across the range.
//
// sum_exp (a logprob's normaliser) is within a bound, not bitwise: exp(r) by a degree-13
// polynomial after r = x - k ln2 (two-part ln2), 2^k by scalef, lanes summed in eight sums.
// GCC 12 flags its own _mm512_undefined_* inside the widening intrinsics (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

#include "compute/kernels/kernel_impl.hpp"

namespace waste::kernels::detail::avx512_impl {
namespace {

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

struct Exp2Table {
  __m512i q[4];  // entries 0-7, 8-15, 16-23, 24-31
  Exp2Table() {
    for (int i = 0; i < 4; ++i) q[i] = _mm512_loadu_si512(kExp2Table.data() + 8 * i);
  }
};

// expf of 8 floats in double lanes, the fast branch's steps (lanes of other branches: garbage).
__m256 expf8(__m256 x, const Exp2Table& table) {
  const __m512d xd = _mm512_cvtps_pd(x);
  const __m512d kd_shifted = _mm512_fmadd_pd(_mm512_set1_pd(kInvLn2N), xd, _mm512_set1_pd(kShift));
  const __m512i ki = _mm512_castpd_si512(kd_shifted);
  const __m512d kd = _mm512_sub_pd(kd_shifted, _mm512_set1_pd(kShift));
  const __m512d r = _mm512_fmsub_pd(_mm512_set1_pd(kInvLn2N), xd, kd);
  // T[ki % 32]: bits 0-3 pick within a pair of registers, bit 4 the pair.
  const __m512i low = _mm512_permutex2var_epi64(table.q[0], ki, table.q[1]);
  const __m512i high = _mm512_permutex2var_epi64(table.q[2], ki, table.q[3]);
  const __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), low, high);
  const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64(ki, 47)));
  const __m512d z = _mm512_fmadd_pd(r, _mm512_set1_pd(kC0), _mm512_set1_pd(kC1));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(kC2), _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(z, r2, y);
  return _mm512_cvtpd_ps(_mm512_mul_pd(y, s));
}

// Lanes whose |x| is outside the fast branch's range (or NaN).
__mmask16 other_branch(__m512 x) {
  const __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff));
  return _mm512_cmpgt_epu32_mask(top, _mm512_set1_epi32(int(kFastTop)));
}

// exp(x) in double for x <= ~709: 2^k exp(r), r = x - k ln2 in [-ln2/2, ln2/2], exp(r) by its
// Taylor polynomial to degree 13 (truncation below 5e-18 relative).
__m512d exp_pd(__m512d x) {
  constexpr double kLn2Hi = 0x1.62e42fefa3800p-1;  // ln 2 in two parts: k * kLn2Hi is exact for |k| < 2^11
  constexpr double kLn2Lo = 0x1.ef35793c76730p-45;
  const __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(0x1.71547652b82fep+0)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Hi), x);
  r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Lo), r);
  __m512d p = _mm512_set1_pd(1.0 / 6227020800.0);  // 1/13!
  constexpr double kInverseFactorials[] = {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
                                           1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,     1.0 / 120.0,
                                           1.0 / 24.0,        1.0 / 6.0,        0.5,             1.0,
                                           1.0};
  for (const double c : kInverseFactorials) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(c));
  __m512d e = _mm512_scalef_pd(p, k);
  // Far below: 0 (also -inf, where r is NaN); far above: +inf.
  e = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x, _mm512_set1_pd(-745.2), _CMP_LT_OQ), e, _mm512_setzero_pd());
  e = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x, _mm512_set1_pd(709.8), _CMP_GT_OQ), e,
                           _mm512_set1_pd(HUGE_VAL));
  return e;
}

}  // namespace

void exp_weights(const float* x, int n, float sub, float div, float* y) {
  static const Exp2Table table;
  const __m512 vsub = _mm512_set1_ps(sub);
  const __m512 vdiv = _mm512_set1_ps(div);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 live = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512 v = _mm512_div_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, x + i), vsub), vdiv);
    const __m256 lo = expf8(_mm512_castps512_ps256(v), table);
    const __m256 hi = expf8(_mm512_extractf32x8_ps(v, 1), table);
    _mm512_mask_storeu_ps(y + i, live, _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1));
    // The library's other branches, lane by lane (the same float it was given).
    if (__mmask16 other = other_branch(v) & live; other != 0) {
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, v);
      for (; other != 0; other &= __mmask16(other - 1)) {
        const int lane = std::countr_zero(unsigned(other));
        y[i + lane] = std::exp(lanes[lane]);
      }
    }
  }
}

double sum_exp(const float* x, std::int64_t n, double sub) {
  const __m512d vsub = _mm512_set1_pd(sub);
  __m512d sums[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(live, x + i);
    for (int half = 0; half < 2; ++half) {
      const __mmask8 lanes = __mmask8(live >> (8 * half));
      const __m256 part = half == 0 ? _mm512_castps512_ps256(v) : _mm512_extractf32x8_ps(v, 1);
      const __m512d e = exp_pd(_mm512_sub_pd(_mm512_cvtps_pd(part), vsub));
      sums[half] = _mm512_mask_add_pd(sums[half], lanes, sums[half], e);
    }
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(sums[0], sums[1]));
}

bool exp_matches_libm() {
  // Probes over the range sampling sees (x <= 0), the fast branch's edges and the others.
  // Evenly spaced in float bits from -0 to -104: every binade of negative inputs.
  std::array<float, 4096> probe{};
  for (std::size_t i = 0; i < probe.size() - 16; ++i) {
    probe[i] = std::bit_cast<float>(std::uint32_t(0x80000000u + i * (0x42d00000u / (probe.size() - 16))));
  }
  const float edges[] = {0.0f, 1.0f, -87.99999f, -88.0f, -88.00001f, -103.27893f, -103.97208f, -104.0f, -1e30f,
                         -HUGE_VALF, HUGE_VALF, std::nanf(""), 3.0f, 88.5f, -1e-30f, -0x1p-149f};
  for (std::size_t i = 0; i < std::size(edges); ++i) probe[probe.size() - 16 + i] = edges[i];
  std::array<float, 4096> got{};
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

}  // namespace waste::kernels::detail::avx512_impl

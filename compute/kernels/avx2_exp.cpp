// Exponentials over a vocabulary row (kernels.hpp `exp_weights`, `sum_exp`) for the AVX2 table, 8
// floats a step: avx512_exp.cpp's kernels in 4-double lanes. exp_weights repeats the C library's
// expf (expf_steps.hpp) with the table by a 64-bit gather and every lane of the library's other
// branches handed to std::exp; kept by the table only where its start-up probe agrees with the running
// C library. sum_exp: the same polynomial, 2^k built in the exponent bits (no scalef in AVX2), and a
// result below 2^-1022 taken as 0 (its share of a sum with a term of 1 is below 1e-300).
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "compute/kernels/avx2.hpp"
#include "compute/kernels/expf_steps.hpp"

namespace waste::kernels::detail::avx2_impl {
namespace {

using namespace expf_steps;

// expf of 4 floats in double lanes, the fast branch's steps (lanes of other branches: garbage).
__m128 expf4(__m128 x) {
  const __m256d xd = _mm256_cvtps_pd(x);
  const __m256d kd_shifted = _mm256_fmadd_pd(_mm256_set1_pd(kInvLn2N), xd, _mm256_set1_pd(kShift));
  const __m256i ki = _mm256_castpd_si256(kd_shifted);
  const __m256d kd = _mm256_sub_pd(kd_shifted, _mm256_set1_pd(kShift));
  const __m256d r = _mm256_fmsub_pd(_mm256_set1_pd(kInvLn2N), xd, kd);
  const __m256i index = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
  const __m256i t = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kExp2Table.data()), index, 8);
  const __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64(ki, 47)));
  const __m256d z = _mm256_fmadd_pd(r, _mm256_set1_pd(kC0), _mm256_set1_pd(kC1));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(r, _mm256_set1_pd(kC2), _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(z, r2, y);
  return _mm256_cvtpd_ps(_mm256_mul_pd(y, s));
}

// A bit per lane whose |x| is outside the fast branch's range (or NaN).
unsigned other_branch(__m256 x) {
  const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
  // top <= 0x7ff, so a signed compare is an unsigned one.
  return unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(int(kFastTop))))));
}

// exp(x) in double: 2^k exp(r), r = x - k ln2, exp(r) by expf_steps' polynomial; 0 below -708
// (and for -inf), +inf above 709.78.
__m256d exp_pd(__m256d x) {
  const __m256d k = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kLn2Hi), x);
  r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kLn2Lo), r);
  __m256d p = _mm256_set1_pd(kInverseFactorials[0]);
  for (std::size_t i = 1; i < kInverseFactorials.size(); ++i) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kInverseFactorials[i]));
  // 2^k for k in [-1022, 1023] in the exponent bits (k clamped there first; the blends below take
  // the lanes outside).
  const __m256d kc = _mm256_min_pd(_mm256_max_pd(k, _mm256_set1_pd(-1022.0)), _mm256_set1_pd(1023.0));
  const __m256i bits = _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(kc)),
                                                          _mm256_set1_epi64x(1023)),
                                         52);
  __m256d e = _mm256_mul_pd(p, _mm256_castsi256_pd(bits));
  e = _mm256_blendv_pd(e, _mm256_setzero_pd(), _mm256_cmp_pd(x, _mm256_set1_pd(-708.0), _CMP_LT_OQ));
  e = _mm256_blendv_pd(e, _mm256_set1_pd(HUGE_VAL), _mm256_cmp_pd(x, _mm256_set1_pd(709.78), _CMP_GT_OQ));
  // NaN in, NaN out (the clamps above dropped it from k).
  return _mm256_blendv_pd(e, x, _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
}

}  // namespace

void exp_weights(const float* x, int n, float sub, float div, float* y) {
  const __m256 vsub = _mm256_set1_ps(sub);
  const __m256 vdiv = _mm256_set1_ps(div);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vsub), vdiv);
    const __m128 lo = expf4(_mm256_castps256_ps128(v));
    const __m128 hi = expf4(_mm256_extractf128_ps(v, 1));
    _mm256_storeu_ps(y + i, _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1));
    // The library's other branches, lane by lane (the same float it was given).
    if (unsigned other = other_branch(v); other != 0) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, v);
      for (; other != 0; other &= other - 1) y[i + std::countr_zero(other)] = std::exp(lanes[std::countr_zero(other)]);
    }
  }
  for (; i < n; ++i) y[i] = std::exp((x[i] - sub) / div);  // the reference's own steps
}

double sum_exp(const float* x, std::int64_t n, double sub) {
  const __m256d vsub = _mm256_set1_pd(sub);
  __m256d sums[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    sums[0] = _mm256_add_pd(sums[0], exp_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), vsub)));
    sums[1] = _mm256_add_pd(sums[1], exp_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), vsub)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(sums[0], sums[1]));
  double total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) total += std::exp(double(x[i]) - sub);
  return total;
}

bool exp_matches_libm() { return expf_steps::agrees_with_libm(exp_weights); }

}  // namespace waste::kernels::detail::avx2_impl

// Exponentials over a vocabulary row (kernels.hpp `exp_weights`, `sum_exp`), 16 floats a step.
//
// exp_weights gives the C library's expf bit for bit: its steps (expf_steps.hpp) in double lanes with
// the same constants and the same FMAs, the 32-entry table from four registers by two `vpermt2q`,
// and every lane of the library's other branches handed to std::exp. The table takes the kernel
// only where the start-up probe (`exp_matches_libm`) agrees with the running C library.
//
// sum_exp (a logprob's normaliser) is within a bound, not bitwise: exp(r) by a degree-13
// polynomial after r = x - k ln2 (two-part ln2), 2^k by scalef, lanes summed in sixteen sums.
// GCC 12 flags its own _mm512_undefined_* inside the widening intrinsics (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

#include "compute/kernels/expf_steps.hpp"
#include "compute/kernels/kernel_impl.hpp"

namespace waste::kernels::detail::avx512_impl {
namespace {

using namespace expf_steps;

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

// exp(x) in double: 2^k exp(r), r = x - k ln2 in [-ln2/2, ln2/2], exp(r) by expf_steps' polynomial.
__m512d exp_pd(__m512d x) {
  const __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(kLog2e)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Hi), x);
  r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Lo), r);
  __m512d p = _mm512_set1_pd(kInverseFactorials[0]);
  for (std::size_t i = 1; i < kInverseFactorials.size(); ++i) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kInverseFactorials[i]));
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

bool exp_matches_libm() { return expf_steps::agrees_with_libm(exp_weights); }

}  // namespace waste::kernels::detail::avx512_impl

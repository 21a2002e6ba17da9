// The int8 trunk product on AVX-512 VNNI (compute/kernels/int8_matmul.hpp has the contract and the
// order). One zmm lane is one row: a tile of 16 rows x one group of 128 columns is unpacked from
// the stored nibbles and transposed into 32 vectors of (16 rows x 4 columns) bytes, then each
// token's 4 activation bytes, broadcast as a dword, meet them in one `vpdpbusd` (64 multiply-adds).
// The transposed tile is built once per group and used by up to 64 tokens. Rows left over after the
// 16-row tiles take the reference loop, which computes the same values.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/kernels/int8_matmul.hpp"
#include "shared/fp16.hpp"

namespace waste::kernels::detail {

namespace {

constexpr int kTileRows = 16;
constexpr int kTokenBlock = 64;  // f32 accumulators kept per tile (64 zmm on the stack)
constexpr int kTokenStep = 8;    // int32 accumulators in registers

// Rows [r0, r0 + 16), group g -> wbuf[k4][row][4] (k4 = column / 4 within the group).
inline void transpose_tile(const QuantMatrix& w, std::int64_t r0, int g, std::uint8_t* rowbuf, std::uint8_t* wbuf) {
  const __m512i m4 = _mm512_set1_epi8(15);
  const __m512i perm_lo = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
  const __m512i perm_hi = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
  for (int r = 0; r < kTileRows; ++r) {
    const __m512i p = _mm512_loadu_si512(w.payload + (r0 + r) * w.row_stride + std::int64_t(g) * (kInt8Group / 2));
    const __m512i lo = _mm512_and_si512(p, m4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), m4);
    // Per 128-bit lane L: unpacklo holds columns 32L..32L+15, unpackhi 32L+16..32L+31.
    const __m512i a = _mm512_unpacklo_epi8(lo, hi);
    const __m512i b = _mm512_unpackhi_epi8(lo, hi);
    _mm512_store_si512(rowbuf + r * kInt8Group, _mm512_permutex2var_epi64(a, perm_lo, b));
    _mm512_store_si512(rowbuf + r * kInt8Group + 64, _mm512_permutex2var_epi64(a, perm_hi, b));
  }
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(kInt8Group));
  for (int k4 = 0; k4 < kInt8Group / 4; ++k4) {
    _mm512_store_si512(wbuf + k4 * 64, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), __mmask16(0xFFFF), idx, rowbuf + k4 * 4, 1));
  }
}

template <int TT>
inline void tokens_step(const std::uint8_t* wbuf, const Int8Acts& a, int t_first, int g, __m512 sw, __m512* accf) {
  __m512i acci[TT];
  const std::int8_t* xb[TT];
  for (int t = 0; t < TT; ++t) {
    acci[t] = _mm512_setzero_si512();
    xb[t] = a.q.data() + std::size_t(t_first + t) * std::size_t(a.cols) + std::size_t(g) * kInt8Group;
  }
  for (int k4 = 0; k4 < kInt8Group / 4; ++k4) {
    const __m512i wv = _mm512_load_si512(wbuf + k4 * 64);
    for (int t = 0; t < TT; ++t) {
      std::int32_t d;
      std::memcpy(&d, xb[t] + k4 * 4, 4);
      acci[t] = _mm512_dpbusd_epi32(acci[t], wv, _mm512_set1_epi32(d));
    }
  }
  for (int t = 0; t < TT; ++t) {
    const std::size_t at = std::size_t(t_first + t) * std::size_t(a.groups) + std::size_t(g);
    const __m512 corr = _mm512_set1_ps(float(-8 * a.sum[at]));
    const __m512 both = _mm512_mul_ps(sw, _mm512_set1_ps(a.scale[at]));
    accf[t] = _mm512_fmadd_ps(_mm512_add_ps(_mm512_cvtepi32_ps(acci[t]), corr), both, accf[t]);
  }
}

}  // namespace

void matmul_i8_avx512vnni(const QuantMatrix& w, const Int8Acts& a, float* y, std::int64_t y_stride,
                          std::int64_t row_begin, std::int64_t row_end) {
  alignas(64) std::uint8_t rowbuf[kTileRows * kInt8Group];
  alignas(64) std::uint8_t wbuf[kTileRows * kInt8Group];
  alignas(64) float swv[kTileRows];
  std::int64_t r0 = row_begin;
  for (; r0 + kTileRows <= row_end; r0 += kTileRows) {
    for (int t0 = 0; t0 < a.n; t0 += kTokenBlock) {
      const int tn = std::min(kTokenBlock, a.n - t0);
      __m512 accf[kTokenBlock];
      for (int t = 0; t < tn; ++t) accf[t] = _mm512_setzero_ps();
      for (int g = 0; g < a.groups; ++g) {
        transpose_tile(w, r0, g, rowbuf, wbuf);
        for (int r = 0; r < kTileRows; ++r) swv[r] = fp16_to_f32(w.scales[(r0 + r) * a.groups + g]);
        const __m512 sw = _mm512_load_ps(swv);
        int t = 0;
        for (; t + kTokenStep <= tn; t += kTokenStep) tokens_step<kTokenStep>(wbuf, a, t0 + t, g, sw, accf + t);
        for (; t < tn; ++t) tokens_step<1>(wbuf, a, t0 + t, g, sw, accf + t);
      }
      for (int t = 0; t < tn; ++t) _mm512_storeu_ps(y + std::int64_t(t0 + t) * y_stride + r0, accf[t]);
    }
  }
  if (r0 < row_end) matmul_i8_generic(w, a, y, y_stride, r0, row_end);
}

}  // namespace waste::kernels::detail

// The int8 trunk product on AVX-512 VNNI (compute/kernels/int8_matmul.hpp has the contract and the
// order). One zmm lane is one row: a tile of 16 rows x one group of 128 columns is unpacked from
// the stored nibbles and transposed into 32 vectors of (16 rows x 4 columns) bytes, then each
// token's 4 activation bytes, broadcast as a dword, meet them in one `vpdpbusd` (64 multiply-adds).
// The transposed tile is built once per group and used by up to 64 tokens. Rows left over after the
// 16-row tiles take the reference loop, which computes the same values.
//
// Q8G (int8 codes) goes the same two ways: its 128 bytes of a row and group are the codes in column
// order, each XOR 0x80 (the code + 128 as an unsigned byte for `vpdpbusd`), and 128 * sum_xq_g is
// taken off as Q4G takes off 8 * sum_xq_g (int8_matmul.hpp: the same value as the reference's).
//
// Fewer than kFewTokensBelow tokens (decode steps, batches of streams) take another tile: the
// transposes would cost more than the products. There each zmm lane is one group's 16 dword
// partial sums of one row: per row and group one 64-byte load of the stored nibbles, unpacked once
// for up to four tokens, the low and high nibbles (even and odd columns) against each token's even
// and odd activations in two `vpdpbusd`; then each token's 16 row vectors are reduced to one vector
// of 16 row sums (integer adds: any order gives the exact sum), and from there the order is the
// reference's, 16 rows per instruction. (One token at a time, each token unpacking the tile again,
// a batch of 4 took 19.4 ms over the lm_head against 11.6 now, its one-token read time.)
// GCC 12 flags its own _mm512_undefined_* inside the widening intrinsics (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "compute/kernels/avx512_common.hpp"
#include "compute/kernels/kernel_impl.hpp"
#include "compute/kernels/int8_matmul.hpp"
#include "shared/fp16.hpp"

namespace waste::kernels::detail {

namespace {

constexpr int kTileRows = 16;
constexpr int kTokenBlock = 64;  // f32 accumulators kept per tile (64 zmm on the stack)
constexpr int kTokenStep = 8;    // int32 accumulators in registers
// Calls of fewer tokens take the few-token tile (groups of kTokenGroup tokens per pass over a tile's
// rows); from here on the transposed tile pays for its transposes.
constexpr int kFewTokensBelow = 16;

// What a format's unsigned codes are offset by (the reference's weight is code - offset).
template <bool Q8>
constexpr int kCodeOffset = Q8 ? 128 : 8;

// Rows [r0, r0 + 16), group g -> wbuf[k4][row][4] (k4 = column / 4 within the group).
template <bool Q8>
inline void transpose_tile(const QuantMatrix& w, std::int64_t r0, int g, std::uint8_t* rowbuf, std::uint8_t* wbuf) {
  const __m512i m4 = _mm512_set1_epi8(15);
  const __m512i perm_lo = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
  const __m512i perm_hi = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int r = 0; r < kTileRows; ++r) {
    if constexpr (Q8) {
      const std::uint8_t* row = w.payload + (r0 + r) * w.row_stride + std::int64_t(g) * kInt8Group;
      _mm512_store_si512(rowbuf + r * kInt8Group, _mm512_xor_si512(_mm512_loadu_si512(row), flip));
      _mm512_store_si512(rowbuf + r * kInt8Group + 64, _mm512_xor_si512(_mm512_loadu_si512(row + 64), flip));
      continue;
    }
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

template <int TT, bool Q8>
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
    const __m512 corr = _mm512_set1_ps(float(-kCodeOffset<Q8> * a.sum[at]));
    const __m512 both = _mm512_mul_ps(sw, _mm512_set1_ps(a.scale[at]));
    accf[t] = _mm512_fmadd_ps(_mm512_add_ps(_mm512_cvtepi32_ps(acci[t]), corr), both, accf[t]);
  }
}

// a[r] holds row r's 16 partial sums: returns the vector whose lane r is row r's total.
inline __m512i reduce_rows(__m512i a[kTileRows]) {
  // Pairs of rows: per 128-bit lane, dwords 0 and 2 belong to the even row, 1 and 3 to the odd.
  __m512i b[8];
  for (int i = 0; i < 8; ++i) {
    b[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_epi32(a[2 * i], a[2 * i + 1]));
  }
  // Quads: per 128-bit lane, dword k belongs to row 4j + k.
  __m512i c[4];
  for (int j = 0; j < 4; ++j) {
    c[j] = _mm512_add_epi32(_mm512_unpacklo_epi64(b[2 * j], b[2 * j + 1]), _mm512_unpackhi_epi64(b[2 * j], b[2 * j + 1]));
  }
  // Across the 128-bit lanes: d[k]'s lanes 0, 1 hold c[2k]'s halves, lanes 2, 3 c[2k + 1]'s.
  __m512i d[2];
  for (int k = 0; k < 2; ++k) {
    d[k] = _mm512_add_epi32(_mm512_shuffle_i32x4(c[2 * k], c[2 * k + 1], 0x88),
                            _mm512_shuffle_i32x4(c[2 * k], c[2 * k + 1], 0xDD));
  }
  return _mm512_add_epi32(_mm512_shuffle_i32x4(d[0], d[1], 0x88), _mm512_shuffle_i32x4(d[0], d[1], 0xDD));
}

// A 16 x 16 f32 transpose in place: v[i] lane j becomes v[j] lane i.
inline void transpose16(__m512 v[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  // u[4j + k], 128-bit chunk L: rows 4j..4j+3 of column 4L + k.
  for (int j = 0; j < 4; ++j) {
    u[4 * j] = _mm512_shuffle_ps(t[4 * j], t[4 * j + 2], 0x44);
    u[4 * j + 1] = _mm512_shuffle_ps(t[4 * j], t[4 * j + 2], 0xEE);
    u[4 * j + 2] = _mm512_shuffle_ps(t[4 * j + 1], t[4 * j + 3], 0x44);
    u[4 * j + 3] = _mm512_shuffle_ps(t[4 * j + 1], t[4 * j + 3], 0xEE);
  }
  for (int k = 0; k < 4; ++k) {
    const __m512 a = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88), b = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xDD);
    const __m512 c = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88), d = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xDD);
    v[k] = _mm512_shuffle_f32x4(a, c, 0x88);
    v[8 + k] = _mm512_shuffle_f32x4(a, c, 0xDD);
    v[4 + k] = _mm512_shuffle_f32x4(b, d, 0x88);
    v[12 + k] = _mm512_shuffle_f32x4(b, d, 0xDD);
  }
}

// Token t's activations split per group into even and odd columns (64 bytes each), the order the
// stored nibbles hold them in.
inline void split_columns(const Int8Acts& a, int t, std::int8_t* out) {
  const std::int8_t* xq = a.q.data() + std::size_t(t) * std::size_t(a.cols);
  for (std::int64_t c = 0; c < a.cols; c += 64) {
    const __m512i v = _mm512_loadu_si512(xq + c);
    const std::int64_t g = c / kInt8Group, half = (c % kInt8Group) / 2;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + g * kInt8Group + half), _mm512_cvtepi16_epi8(v));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + g * kInt8Group + 64 + half),
                        _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
  }
}

// Rows [r0, r0 + valid) (valid <= 16; the missing rows repeat the last one and are not stored) for
// the T tokens from t0, whose activations are xs + t * cols (Q4G: split into even and odd columns;
// Q8G: as they are): y_t[r] as the reference computes it. Each row's bytes of a group are loaded and
// unpacked once for all T tokens; each token's 16 row vectors are then reduced and scaled as for one
// token. The same groups of the next 16 rows are prefetched into L2 as these are read (decode
// streams the matrix from DRAM).
template <bool Q8, int T>
void rows_tokens(const QuantMatrix& w, const Int8Acts& a, const std::int8_t* xs, int t0, float* y,
                 std::int64_t y_stride, std::int64_t r0, int valid, bool prefetch) {
  const int groups = a.groups;
  const std::size_t cols = std::size_t(a.cols);
  const std::uint8_t* rows[kTileRows];
  for (int r = 0; r < kTileRows; ++r) rows[r] = w.payload + (r0 + std::min(r, valid - 1)) * w.row_stride;
  const std::int64_t ahead = kTileRows * w.row_stride;
  const __m512i m4 = _mm512_set1_epi8(15);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  alignas(64) float sw[16][kTileRows];  // [group within the block of 16][row]
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int g0 = 0; g0 < groups; g0 += 16) {
    const int gn = std::min(16, groups - g0);
    __m512 by_row[kTileRows];
    for (int r = 0; r < kTileRows; ++r) {
      by_row[r] = avx512_common::fp16x16_to_f32(w.scales + (r0 + std::min(r, valid - 1)) * groups + g0, gn);
    }
    transpose16(by_row);
    for (int gi = 0; gi < 16; ++gi) _mm512_store_ps(sw[gi], by_row[gi]);
    for (int gi = 0; gi < gn; ++gi) {
      const int g = g0 + gi;
      const std::int64_t off = std::int64_t(g) * (Q8 ? kInt8Group : kInt8Group / 2);
      __m512i xe[T], xo[T];
      for (int t = 0; t < T; ++t) {
        const std::int8_t* xt = xs + std::size_t(t) * cols + std::size_t(g) * kInt8Group;
        xe[t] = _mm512_loadu_si512(xt);
        xo[t] = _mm512_loadu_si512(xt + 64);
      }
      __m512i part[T][kTileRows];
      for (int r = 0; r < kTileRows; ++r) {
        if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(rows[r] + ahead + off), _MM_HINT_T1);
        __m512i lo, hi;
        if constexpr (Q8) {
          if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(rows[r] + ahead + off + 64), _MM_HINT_T1);
          lo = _mm512_xor_si512(_mm512_loadu_si512(rows[r] + off), flip);
          hi = _mm512_xor_si512(_mm512_loadu_si512(rows[r] + off + 64), flip);
        } else {
          const __m512i p = _mm512_loadu_si512(rows[r] + off);
          lo = _mm512_and_si512(p, m4);
          hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), m4);
        }
        for (int t = 0; t < T; ++t) {
          part[t][r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xe[t]), hi, xo[t]);
        }
      }
      const __m512 sw_g = _mm512_load_ps(sw[gi]);
      for (int t = 0; t < T; ++t) {
        const __m512i sums = reduce_rows(part[t]);
        const std::size_t at = std::size_t(t0 + t) * std::size_t(groups) + std::size_t(g);
        const __m512 corr = _mm512_set1_ps(float(-kCodeOffset<Q8> * a.sum[at]));
        const __m512 both = _mm512_mul_ps(sw_g, _mm512_set1_ps(a.scale[at]));
        acc[t] = _mm512_fmadd_ps(_mm512_add_ps(_mm512_cvtepi32_ps(sums), corr), both, acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    _mm512_mask_storeu_ps(y + std::int64_t(t0 + t) * y_stride + r0, static_cast<__mmask16>((1u << valid) - 1u),
                          acc[t]);
  }
}

// Up to kTokenGroup tokens share one pass over a tile's weights (their partial sums stay in L1).
constexpr int kTokenGroup = 4;

template <bool Q8, int T>
void rows_tokens_upto(int n, const QuantMatrix& w, const Int8Acts& a, const std::int8_t* xs, int t0, float* y,
                      std::int64_t y_stride, std::int64_t r0, int valid, bool prefetch) {
  if constexpr (T > 1) {
    if (n < T) return rows_tokens_upto<Q8, T - 1>(n, w, a, xs, t0, y, y_stride, r0, valid, prefetch);
  }
  rows_tokens<Q8, T>(w, a, xs, t0, y, y_stride, r0, valid, prefetch);
}

template <bool Q8>
void matmul_few_tokens(const QuantMatrix& w, const Int8Acts& a, float* y, std::int64_t y_stride,
                       std::int64_t row_begin, std::int64_t row_end) {
  const std::int8_t* xs = a.q.data();
  if constexpr (!Q8) {
    thread_local std::vector<std::int8_t> split;
    split.resize(std::size_t(a.n) * std::size_t(a.cols));
    for (int t = 0; t < a.n; ++t) split_columns(a, t, split.data() + std::size_t(t) * std::size_t(a.cols));
    xs = split.data();
  }
  for (std::int64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
    const int valid = int(std::min<std::int64_t>(kTileRows, row_end - r0));
    const bool prefetch = r0 + 2 * kTileRows <= row_end;
    for (int t0 = 0; t0 < a.n; t0 += kTokenGroup) {
      const int n = std::min(kTokenGroup, a.n - t0);
      rows_tokens_upto<Q8, kTokenGroup>(n, w, a, xs + std::size_t(t0) * std::size_t(a.cols), t0, y, y_stride, r0,
                                        valid, prefetch && t0 == 0);
    }
  }
}

template <bool Q8>
void matmul_many_tokens(const QuantMatrix& w, const Int8Acts& a, float* y, std::int64_t y_stride,
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
        transpose_tile<Q8>(w, r0, g, rowbuf, wbuf);
        for (int r = 0; r < kTileRows; ++r) swv[r] = fp16_to_f32(w.scales[(r0 + r) * a.groups + g]);
        const __m512 sw = _mm512_load_ps(swv);
        int t = 0;
        for (; t + kTokenStep <= tn; t += kTokenStep) tokens_step<kTokenStep, Q8>(wbuf, a, t0 + t, g, sw, accf + t);
        for (; t < tn; ++t) tokens_step<1, Q8>(wbuf, a, t0 + t, g, sw, accf + t);
      }
      for (int t = 0; t < tn; ++t) _mm512_storeu_ps(y + std::int64_t(t0 + t) * y_stride + r0, accf[t]);
    }
  }
  if (r0 < row_end) matmul_i8_generic(w, a, y, y_stride, r0, row_end);
}

}  // namespace

void matmul_i8_avx512vnni(const QuantMatrix& w, const Int8Acts& a, float* y, std::int64_t y_stride,
                          std::int64_t row_begin, std::int64_t row_end) {
  const bool q8 = w.fmt == kFmtQ8G;
  if (a.n < kFewTokensBelow) {
    (q8 ? matmul_few_tokens<true> : matmul_few_tokens<false>)(w, a, y, y_stride, row_begin, row_end);
  } else {
    (q8 ? matmul_many_tokens<true> : matmul_many_tokens<false>)(w, a, y, y_stride, row_begin, row_end);
  }
}

}  // namespace waste::kernels::detail

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
// transposes would cost more than the products. One token (a decode step) uses each row's bytes as
// stored and reduces 16 row vectors (rows_one_token: at the read rate). From two tokens a tile's
// rows go in quads {q, 4+q, 8+q, 12+q}: a quad's four rows' stored bytes of a group are
// transposed by 128-bit chunks (lane L =
// row 4L+q), each chunk unpacked once for up to four tokens and met with the token's matching 16
// activation bytes repeated in all four lanes; four quads' vectors (four partial sums per row)
// reduce to the 16 row sums in 9 instructions per token (integer adds: any order gives the exact
// sum), and from there the order is the reference's, 16 rows per instruction. (Session 21's tile
// reduced 16 row vectors of 16 partial sums per token, 45 instructions, and spilled them at 4
// tokens: Q4G 163,840 x 2,304 against 4 tokens 8.7-9.1 ms against 7.9-8.1 now; at 4 tokens
// `vpdpbusd` itself is the bound, one per 2 cycles on a Zen 4.)
// GCC 12 flags its own _mm512_undefined_* inside the widening intrinsics (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <type_traits>
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
enum class Code { q4, q8, q6 };  // Q4G, Q8G, Q6P (int8_matmul.hpp)
template <Code C>
constexpr bool kQ8 = C == Code::q8;
template <Code C>
constexpr int kCodeOffset = C == Code::q8 ? 128 : C == Code::q6 ? 32 : 8;
// Bytes of a row's group (Q6P: its low bits; the high bits follow all groups' low bits).
template <Code C>
constexpr int kGroupBytes = C == Code::q8 ? kInt8Group : kInt8Group / 2;
// Q6P: where row `row`'s group g's high-bit planes start (int8_matmul.hpp).
inline const std::uint8_t* q6_planes(const std::uint8_t* row, int groups, int g) {
  return row + q6p_planes_offset(groups, g);
}

// Q6P: codes from the low nibbles of `nibbles` (the stored byte, or shifted down by 4 for the high
// nibbles) and a plane whose bits 4, 5 hold each byte's high 2 bits (the mask drops the rest).
inline __m512i q6_codes(__m512i nibbles, __m512i plane_at_4) {
  const __m512i high = _mm512_and_si512(plane_at_4, _mm512_set1_epi8(0x30));
  return _mm512_ternarylogic_epi32(nibbles, _mm512_set1_epi8(15), high, 0xEA);  // (a & b) | c
}
// Bits 2k, 2k + 1 of every byte to bits 4, 5 (16-bit shifts: what crosses a byte lands outside them).
template <int K>
inline __m512i q6_field_at_4(__m512i plane) {
  if constexpr (K == 0) return _mm512_slli_epi16(plane, 4);
  if constexpr (K == 1) return _mm512_slli_epi16(plane, 2);
  if constexpr (K == 2) return plane;
  if constexpr (K == 3) return _mm512_srli_epi16(plane, 2);
}
// One 16-byte plane in all four 128-bit lanes, lane k shifted as q6_field_at_4<k> (the rotate count
// (4 - 2k) mod 32 per lane: a 32-bit rotate moves the field as the shifts do).
inline __m512i q6_lanes_at_4(const std::uint8_t* plane) {
  const __m512i counts = _mm512_set_epi32(30, 30, 30, 30, 0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4);
  return _mm512_rolv_epi32(_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(plane))), counts);
}

// Rows [r0, r0 + 16), group g -> wbuf[k4][row][4] (k4 = column / 4 within the group).
template <Code C>
inline void transpose_tile(const QuantMatrix& w, std::int64_t r0, int g, std::uint8_t* rowbuf, std::uint8_t* wbuf) {
  const __m512i m4 = _mm512_set1_epi8(15);
  const __m512i perm_lo = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
  const __m512i perm_hi = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int r = 0; r < kTileRows; ++r) {
    if constexpr (kQ8<C>) {
      const std::uint8_t* row = w.payload + (r0 + r) * w.row_stride + std::int64_t(g) * kInt8Group;
      _mm512_store_si512(rowbuf + r * kInt8Group, _mm512_xor_si512(_mm512_loadu_si512(row), flip));
      _mm512_store_si512(rowbuf + r * kInt8Group + 64, _mm512_xor_si512(_mm512_loadu_si512(row + 64), flip));
      continue;
    }
    const std::uint8_t* row = w.payload + (r0 + r) * w.row_stride;
    const __m512i p = _mm512_loadu_si512(row + std::int64_t(g) * kGroupBytes<C>);
    __m512i lo, hi;
    if constexpr (C == Code::q6) {
      const std::uint8_t* planes = q6_planes(row, int(w.cols / kInt8Group), g);
      lo = q6_codes(p, q6_lanes_at_4(planes));
      hi = q6_codes(_mm512_srli_epi16(p, 4), q6_lanes_at_4(planes + 16));
    } else {
      lo = _mm512_and_si512(p, m4);
      hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), m4);
    }
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

template <int TT, Code C>
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
    const __m512 corr = _mm512_set1_ps(float(-kCodeOffset<C> * a.sum[at]));
    const __m512 both = _mm512_mul_ps(sw, _mm512_set1_ps(a.scale[at]));
    accf[t] = _mm512_fmadd_ps(_mm512_add_ps(_mm512_cvtepi32_ps(acci[t]), corr), both, accf[t]);
  }
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

// Bytes per token and group of the few-token tile's activations: eight 16-byte chunks, each
// repeated in the four 128-bit lanes of a zmm (one load per product, no shuffles).
constexpr int kLaneGroupBytes = 8 * 64;

// Token t's activations, per group, as the few-token tile takes them: Q4G chunk j < 4 holds even
// columns 32j, 32j + 2, .. + 30 (the low nibbles of the stored bytes 16j..16j+15), chunk 4 + j the
// odd ones; Q8G chunk j holds columns 16j..16j+15. Each chunk repeated in the four lanes.
template <Code C>
inline void lane_columns(const Int8Acts& a, int t, std::int8_t* out) {
  const std::int8_t* xq = a.q.data() + std::size_t(t) * std::size_t(a.cols);
  for (int g = 0; g < a.groups; ++g) {
    const std::int8_t* x = xq + std::size_t(g) * kInt8Group;
    std::int8_t* o = out + std::size_t(g) * kLaneGroupBytes;
    for (int half = 0; half < 2; ++half) {
      if constexpr (kQ8<C>) {
        for (int j = 0; j < 4; ++j) {
          const __m128i chunk = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + 64 * half + 16 * j));
          _mm512_storeu_si512(o + 64 * (4 * half + j), _mm512_broadcast_i32x4(chunk));
        }
      } else {
        const __m512i v = _mm512_loadu_si512(x + 64 * half);
        // columns 64 half .. + 63: evens -> chunks 2 half, 2 half + 1; odds -> 4 + 2 half, 4 + 2 half + 1
        const __m256i even = _mm512_cvtepi16_epi8(v), odd = _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8));
        _mm512_storeu_si512(o + 64 * (2 * half), _mm512_broadcast_i32x4(_mm256_castsi256_si128(even)));
        _mm512_storeu_si512(o + 64 * (2 * half + 1), _mm512_broadcast_i32x4(_mm256_extracti128_si256(even, 1)));
        _mm512_storeu_si512(o + 64 * (4 + 2 * half), _mm512_broadcast_i32x4(_mm256_castsi256_si128(odd)));
        _mm512_storeu_si512(o + 64 * (4 + 2 * half + 1), _mm512_broadcast_i32x4(_mm256_extracti128_si256(odd, 1)));
      }
    }
  }
}

inline void transpose_chunks(const __m512i P[4], __m512i V[4]) {
  const __m512i a = _mm512_shuffle_i32x4(P[0], P[1], 0x44), b = _mm512_shuffle_i32x4(P[0], P[1], 0xEE);
  const __m512i c = _mm512_shuffle_i32x4(P[2], P[3], 0x44), d = _mm512_shuffle_i32x4(P[2], P[3], 0xEE);
  V[0] = _mm512_shuffle_i32x4(a, c, 0x88);
  V[1] = _mm512_shuffle_i32x4(a, c, 0xDD);
  V[2] = _mm512_shuffle_i32x4(b, d, 0x88);
  V[3] = _mm512_shuffle_i32x4(b, d, 0xDD);
}

// Four quads' partial sums (Q[q]: lane L holds row 4L + q's four dword partials) -> the vector
// whose dword 4L + q is row 4L + q's total.
inline __m512i reduce_quads(const __m512i Q[4]) {
  const __m512i b01 = _mm512_add_epi32(_mm512_unpacklo_epi32(Q[0], Q[1]), _mm512_unpackhi_epi32(Q[0], Q[1]));
  const __m512i b23 = _mm512_add_epi32(_mm512_unpacklo_epi32(Q[2], Q[3]), _mm512_unpackhi_epi32(Q[2], Q[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(b01, b23), _mm512_unpackhi_epi64(b01, b23));
}

// What both few-token tiles share: rows [r0, r0 + valid) (valid <= 16; the missing rows repeat the
// last one and are not stored) walked a block of 16 groups at a time, the block's row scales
// converted and transposed once; per group `group_sums(g, sums)` leaves each token's 16 row totals
// in sums[t], and from there the order is the reference's, 16 rows per instruction.
template <Code C, int T, class GroupSums>
[[gnu::always_inline]] inline void tile_rows(const QuantMatrix& w, const Int8Acts& a, int t0, float* y,
                                             std::int64_t y_stride, std::int64_t r0, int valid,
                                             GroupSums&& group_sums) {
  const int groups = a.groups;
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
      __m512i sums[T];
      group_sums(g, sums);
      const __m512 sw_g = _mm512_load_ps(sw[gi]);
      for (int t = 0; t < T; ++t) {
        const std::size_t at = std::size_t(t0 + t) * std::size_t(groups) + std::size_t(g);
        const __m512 corr = _mm512_set1_ps(float(-kCodeOffset<C> * a.sum[at]));
        const __m512 both = _mm512_mul_ps(sw_g, _mm512_set1_ps(a.scale[at]));
        acc[t] = _mm512_fmadd_ps(_mm512_add_ps(_mm512_cvtepi32_ps(sums[t]), corr), both, acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    _mm512_mask_storeu_ps(y + std::int64_t(t0 + t) * y_stride + r0, static_cast<__mmask16>((1u << valid) - 1u),
                          acc[t]);
  }
}

// The tile's rows for the T tokens from t0, whose activations are laid out by lane_columns at
// xs + t * groups * kLaneGroupBytes: y_t[r] as the reference computes it. The rows go in quads
// q = 0..3 of rows {q, 4 + q, 8 + q, 12 + q}: per quad and group the four rows' bytes are loaded
// once and transposed by 128-bit chunks (lane L = row 4L + q), each chunk unpacked once for all T
// tokens and multiplied by the token's matching 16 activation bytes repeated in every lane. A
// quad's vector then holds four partial sums per row, and four quads reduce to the 16 row totals
// in 9 operations per token (integer adds: any order gives the exact sum). The same groups of the
// next 16 rows are prefetched into L2 as these are read (decode streams the matrix from DRAM).
template <Code C, int T>
void rows_tokens(const QuantMatrix& w, const Int8Acts& a, const std::int8_t* xs, int t0, float* y,
                 std::int64_t y_stride, std::int64_t r0, int valid, bool prefetch) {
  const std::size_t token_bytes = std::size_t(a.groups) * kLaneGroupBytes;
  const std::uint8_t* rows[kTileRows];
  for (int r = 0; r < kTileRows; ++r) rows[r] = w.payload + (r0 + std::min(r, valid - 1)) * w.row_stride;
  const std::int64_t ahead = kTileRows * w.row_stride;
  const __m512i m4 = _mm512_set1_epi8(15);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  constexpr int kParts = kQ8<C> ? 2 : 1;  // 64-byte parts of a row's group
  tile_rows<C, T>(w, a, t0, y, y_stride, r0, valid, [&](int g, __m512i* sums) __attribute__((always_inline)) {
    const std::int64_t off = std::int64_t(g) * kGroupBytes<C>;
    const std::int8_t* xg[T];
    for (int t = 0; t < T; ++t) xg[t] = xs + std::size_t(t) * token_bytes + std::size_t(g) * kLaneGroupBytes;
    __m512i quad[T][4];
    for (int q = 0; q < 4; ++q) {
      for (int t = 0; t < T; ++t) quad[t][q] = _mm512_setzero_si512();
      for (int part = 0; part < kParts; ++part) {
        __m512i P[4], V[4];
        for (int L = 0; L < 4; ++L) {
          const std::uint8_t* at = rows[4 * L + q] + off + 64 * part;
          if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(at + ahead), _MM_HINT_T1);
          P[L] = _mm512_loadu_si512(at);
        }
        transpose_chunks(P, V);
        // Q6P: lane L of `even` / `odd` holds row 4L + q's high-bit plane of even / odd columns.
        __m512i even = _mm512_setzero_si512(), odd = _mm512_setzero_si512();
        if constexpr (C == Code::q6) {
          const auto planes = [&](int L) {
            const std::uint8_t* at = q6_planes(rows[4 * L + q], a.groups, g);
            if (prefetch && g % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(at + ahead), _MM_HINT_T1);
            return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
          };
          const __m512i a01 = _mm512_inserti64x4(_mm512_castsi256_si512(planes(0)), planes(1), 1);
          const __m512i a23 = _mm512_inserti64x4(_mm512_castsi256_si512(planes(2)), planes(3), 1);
          even = _mm512_shuffle_i32x4(a01, a23, 0x88);
          odd = _mm512_shuffle_i32x4(a01, a23, 0xDD);
        }
        const auto chunk = [&]<int k>(std::integral_constant<int, k>) __attribute__((always_inline)) {
          if constexpr (kQ8<C>) {
            // columns 64 part + 16k .. + 15
            const __m512i wv = _mm512_xor_si512(V[k], flip);
            for (int t = 0; t < T; ++t) {
              quad[t][q] = _mm512_dpbusd_epi32(quad[t][q], wv, _mm512_loadu_si512(xg[t] + 64 * (4 * part + k)));
            }
          } else {
            // even columns 32k, 32k + 2, ... (low nibbles) and the odd ones (high nibbles)
            __m512i lo, hi;
            if constexpr (C == Code::q6) {
              lo = q6_codes(V[k], q6_field_at_4<k>(even));
              hi = q6_codes(_mm512_srli_epi16(V[k], 4), q6_field_at_4<k>(odd));
            } else {
              lo = _mm512_and_si512(V[k], m4);
              hi = _mm512_and_si512(_mm512_srli_epi16(V[k], 4), m4);
            }
            for (int t = 0; t < T; ++t) {
              quad[t][q] = _mm512_dpbusd_epi32(quad[t][q], lo, _mm512_loadu_si512(xg[t] + 64 * k));
              quad[t][q] = _mm512_dpbusd_epi32(quad[t][q], hi, _mm512_loadu_si512(xg[t] + 64 * (4 + k)));
            }
          }
        };
        chunk(std::integral_constant<int, 0>{});
        chunk(std::integral_constant<int, 1>{});
        chunk(std::integral_constant<int, 2>{});
        chunk(std::integral_constant<int, 3>{});
      }
    }
    for (int t = 0; t < T; ++t) sums[t] = reduce_quads(quad[t]);
  });
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

// One token (a decode step): each row's group is used as stored, the low and high nibbles (even
// and odd columns; Q8G: the two halves) against the token's activations split the same way once
// per call, two `vpdpbusd` a row; the 16 row vectors of 16 partial sums reduce to one vector of
// row sums (45 instructions). With one token this streams the matrix at the read rate, and the
// quad tile below was no faster there (bench_kernels lm_head, alternated: 87-94% of a plain read
// through the quads, 89-96% this way, within the machine's noise), so a decode step keeps it.
template <Code C>
void rows_one_token(const QuantMatrix& w, const Int8Acts& a, const std::int8_t* xs, float* y, std::int64_t r0,
                    int valid, bool prefetch) {
  const std::uint8_t* rows[kTileRows];
  for (int r = 0; r < kTileRows; ++r) rows[r] = w.payload + (r0 + std::min(r, valid - 1)) * w.row_stride;
  const std::int64_t ahead = kTileRows * w.row_stride;
  const __m512i m4 = _mm512_set1_epi8(15);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  tile_rows<C, 1>(w, a, 0, y, 0, r0, valid, [&](int g, __m512i* sums) __attribute__((always_inline)) {
    const std::int64_t off = std::int64_t(g) * kGroupBytes<C>;
    const __m512i xe = _mm512_loadu_si512(xs + std::size_t(g) * kInt8Group);
    const __m512i xo = _mm512_loadu_si512(xs + std::size_t(g) * kInt8Group + 64);
    __m512i part[kTileRows];
    for (int r = 0; r < kTileRows; ++r) {
      if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(rows[r] + ahead + off), _MM_HINT_T1);
      __m512i lo, hi;
      if constexpr (kQ8<C>) {
        if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(rows[r] + ahead + off + 64), _MM_HINT_T1);
        lo = _mm512_xor_si512(_mm512_loadu_si512(rows[r] + off), flip);
        hi = _mm512_xor_si512(_mm512_loadu_si512(rows[r] + off + 64), flip);
      } else if constexpr (C == Code::q6) {
        const std::uint8_t* planes = q6_planes(rows[r], a.groups, g);
        if (prefetch && g % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(planes + ahead), _MM_HINT_T1);
        const __m512i p = _mm512_loadu_si512(rows[r] + off);
        lo = q6_codes(p, q6_lanes_at_4(planes));
        hi = q6_codes(_mm512_srli_epi16(p, 4), q6_lanes_at_4(planes + 16));
      } else {
        const __m512i p = _mm512_loadu_si512(rows[r] + off);
        lo = _mm512_and_si512(p, m4);
        hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), m4);
      }
      part[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xe), hi, xo);
    }
    sums[0] = reduce_rows(part);
  });
}

// Up to kTokenGroup tokens share one pass over a tile's weights (their partial sums stay in L1).
constexpr int kTokenGroup = 4;

template <Code C, int T>
void rows_tokens_upto(int n, const QuantMatrix& w, const Int8Acts& a, const std::int8_t* xs, int t0, float* y,
                      std::int64_t y_stride, std::int64_t r0, int valid, bool prefetch) {
  if constexpr (T > 1) {
    if (n < T) return rows_tokens_upto<C, T - 1>(n, w, a, xs, t0, y, y_stride, r0, valid, prefetch);
  }
  rows_tokens<C, T>(w, a, xs, t0, y, y_stride, r0, valid, prefetch);
}

template <Code C>
void matmul_few_tokens(const QuantMatrix& w, const Int8Acts& a, float* y, std::int64_t y_stride,
                       std::int64_t row_begin, std::int64_t row_end) {
  if (a.n == 1) {
    const std::int8_t* xs = a.q.data();
    if constexpr (!kQ8<C>) {
      thread_local std::vector<std::int8_t> split;
      split.resize(std::size_t(a.cols));
      split_columns(a, 0, split.data());
      xs = split.data();
    }
    for (std::int64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
      const int valid = int(std::min<std::int64_t>(kTileRows, row_end - r0));
      rows_one_token<C>(w, a, xs, y, r0, valid, r0 + 2 * kTileRows <= row_end);
    }
    return;
  }
  thread_local std::vector<std::int8_t> lanes;
  const std::size_t token_bytes = std::size_t(a.groups) * kLaneGroupBytes;
  lanes.resize(std::size_t(a.n) * token_bytes);
  for (int t = 0; t < a.n; ++t) lane_columns<C>(a, t, lanes.data() + std::size_t(t) * token_bytes);
  const std::int8_t* xs = lanes.data();
  for (std::int64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
    const int valid = int(std::min<std::int64_t>(kTileRows, row_end - r0));
    const bool prefetch = r0 + 2 * kTileRows <= row_end;
    for (int t0 = 0; t0 < a.n; t0 += kTokenGroup) {
      const int n = std::min(kTokenGroup, a.n - t0);
      rows_tokens_upto<C, kTokenGroup>(n, w, a, xs + std::size_t(t0) * token_bytes, t0, y, y_stride, r0, valid,
                                        prefetch && t0 == 0);
    }
  }
}

template <Code C>
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
        transpose_tile<C>(w, r0, g, rowbuf, wbuf);
        for (int r = 0; r < kTileRows; ++r) swv[r] = fp16_to_f32(w.scales[(r0 + r) * a.groups + g]);
        const __m512 sw = _mm512_load_ps(swv);
        int t = 0;
        for (; t + kTokenStep <= tn; t += kTokenStep) tokens_step<kTokenStep, C>(wbuf, a, t0 + t, g, sw, accf + t);
        for (; t < tn; ++t) tokens_step<1, C>(wbuf, a, t0 + t, g, sw, accf + t);
      }
      for (int t = 0; t < tn; ++t) _mm512_storeu_ps(y + std::int64_t(t0 + t) * y_stride + r0, accf[t]);
    }
  }
  if (r0 < row_end) matmul_i8_generic(w, a, y, y_stride, r0, row_end);
}

}  // namespace

void matmul_i8_avx512vnni(const QuantMatrix& w, const Int8Acts& a, float* y, std::int64_t y_stride,
                          std::int64_t row_begin, std::int64_t row_end) {
  const bool few = a.n < kFewTokensBelow;
  if (w.fmt == kFmtQ8G) {
    (few ? matmul_few_tokens<Code::q8> : matmul_many_tokens<Code::q8>)(w, a, y, y_stride, row_begin, row_end);
  } else if (w.fmt == kFmtQ6P) {
    (few ? matmul_few_tokens<Code::q6> : matmul_many_tokens<Code::q6>)(w, a, y, y_stride, row_begin, row_end);
  } else {
    (few ? matmul_few_tokens<Code::q4> : matmul_many_tokens<Code::q4>)(w, a, y, y_stride, row_begin, row_end);
  }
}

}  // namespace waste::kernels::detail

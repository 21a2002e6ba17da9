// The AVX2 table's VQ4P apply from registers: each 64-entry int8 stage table looked up by four
// in-lane byte shuffles (vpshufb) instead of 32-bit gathers.
//
// A stage table q (64 int8 entries, q0..q3 its four 16-entry quarters) is kept as four 16-byte
// registers X0 = q0, X1 = q0 ^ q1, X2 = q1 ^ q2, X3 = q2 ^ q3, each broadcast to both 128-bit lanes.
// vpshufb gives 0 where an index byte has its top bit set and reads entry (index & 15) otherwise, so
// for an index i in [0, 64)
//   shuffle(X0, i) ^ shuffle(X1, i - 16) ^ shuffle(X2, i - 32) ^ shuffle(X3, i - 48) = q[i]:
// the terms whose i - 16k is negative vanish and the others telescope to the quarter i falls in.
// Per block of 32 rows and vector position the 96 index bytes (3 a row) are split into their four
// 6-bit stage indices, one byte a row; the four looked-up int8 values are summed a stage pair at a
// time by vpmaddubsw (1 * a + 1 * b, exact) into int16 sums, exact for a LUT block (at most
// 4 * 32 * 128 in magnitude), then scaled in float in generic's order: bit-identical to generic.
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <vector>

#include "compute/kernels/avx2.hpp"
#include "compute/kernels/avx2_common.hpp"
#include "compute/kernels/kernel_impl.hpp"
#include "shared/fp16.hpp"

namespace waste::kernels::detail::avx2_impl {
namespace {

constexpr int kEntries = 64;
constexpr int kPerVector = 4 * kEntries;
constexpr int kRun = 3;  // index bytes a row and vector position

// Byte k of lane l's 16-row group (48 bytes, loaded as three 16-byte pieces) is byte 3k + j of the
// group: kSplit[piece][j] selects, from piece p (bytes 16p .. 16p + 15), the bytes of plane j that
// lie in it (-128 elsewhere, which vpshufb turns into 0).
struct SplitMasks {
  alignas(16) std::int8_t m[3][3][16];
  constexpr SplitMasks() : m{} {
    for (int p = 0; p < 3; ++p) {
      for (int j = 0; j < 3; ++j) {
        for (int k = 0; k < 16; ++k) {
          const int src = 3 * k + j - 16 * p;
          m[p][j][k] = src >= 0 && src < 16 ? static_cast<std::int8_t>(src) : std::int8_t{-128};
        }
      }
    }
  }
};
constexpr SplitMasks kSplit{};

inline __m256i mask_pair(int p, int j) {
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kSplit.m[p][j])));
}

// The four stage indices of 32 rows (two 16-row lanes: rows 0-15 low, 16-31 high) at one position.
struct StageIndex {
  __m256i i[4];
};

inline StageIndex split_indices(const std::uint8_t* p, const __m256i (&masks)[3][3]) {
  // lane 0: rows 0-15 (bytes 0..47), lane 1: rows 16-31 (bytes 48..95)
  __m256i piece[3];
  for (int k = 0; k < 3; ++k) {
    piece[k] = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p + 48 + 16 * k),
                                   reinterpret_cast<const __m128i*>(p + 16 * k));
  }
  __m256i plane[3];
  for (int j = 0; j < 3; ++j) {
    plane[j] = _mm256_or_si256(
        _mm256_or_si256(_mm256_shuffle_epi8(piece[0], masks[0][j]), _mm256_shuffle_epi8(piece[1], masks[1][j])),
        _mm256_shuffle_epi8(piece[2], masks[2][j]));
  }
  const __m256i low6 = _mm256_set1_epi8(63);
  StageIndex s;
  // Byte shifts by 16-bit shifts and a mask that drops the bits crossing from the neighbour byte.
  s.i[0] = _mm256_and_si256(plane[0], low6);
  s.i[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(plane[0], 6), _mm256_set1_epi8(0x03)),
                           _mm256_and_si256(_mm256_slli_epi16(plane[1], 2), _mm256_set1_epi8(0x3C)));
  s.i[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(plane[1], 4), _mm256_set1_epi8(0x0F)),
                           _mm256_and_si256(_mm256_slli_epi16(plane[2], 4), _mm256_set1_epi8(0x30)));
  s.i[3] = _mm256_and_si256(_mm256_srli_epi16(plane[2], 2), low6);
  return s;
}

// One stage's lookup of 32 indices in [0, 64) from its four telescoped quarters.
inline __m256i lookup64(const __m256i* x, __m256i i) {
  const __m256i sixteen = _mm256_set1_epi8(16);
  const __m256i i1 = _mm256_sub_epi8(i, sixteen);
  const __m256i i2 = _mm256_sub_epi8(i1, sixteen);
  const __m256i i3 = _mm256_sub_epi8(i2, sixteen);
  return _mm256_xor_si256(_mm256_xor_si256(_mm256_shuffle_epi8(x[0], i), _mm256_shuffle_epi8(x[1], i1)),
                          _mm256_xor_si256(_mm256_shuffle_epi8(x[2], i2), _mm256_shuffle_epi8(x[3], i3)));
}

}  // namespace

void rvq_apply_vq4p_shuffle(const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales, float* y,
                            int row_begin, int row_end) {
  assert(row_begin % kRowBlock == 0);
  const std::int64_t block_bytes = static_cast<std::int64_t>(m.n_vectors) * kRowBlock * kRun;
  // Every position's telescoped quarters (stage, quarter; 32 bytes each, both lanes), made once a
  // call, so each 64-row block's indices are read in one sequential pass over all positions.
  thread_local std::vector<__m256i> tables;
  tables.resize(static_cast<std::size_t>(m.n_vectors) * 16);
  for (int v = 0; v < m.n_vectors; ++v) {
    for (int s = 0; s < 4; ++s) {
      const std::int8_t* q = lut_q + static_cast<std::int64_t>(v) * kPerVector + s * kEntries;
      __m128i prev = _mm_setzero_si128();
      for (int k = 0; k < 4; ++k) {
        const __m128i quarter = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * k));
        tables[std::size_t(v) * 16 + std::size_t(s) * 4 + std::size_t(k)] =
            _mm256_broadcastsi128_si256(_mm_xor_si128(quarter, prev));
        prev = quarter;
      }
    }
  }
  __m256i masks[3][3];
  for (int p = 0; p < 3; ++p) {
    for (int j = 0; j < 3; ++j) masks[p][j] = mask_pair(p, j);
  }
  const __m256i ones = _mm256_set1_epi8(1);
  for (int r0 = row_begin; r0 < row_end; r0 += kRowBlock) {
    const std::uint8_t* block = m.index + static_cast<std::int64_t>(r0 / kRowBlock) * block_bytes;
    alignas(32) float acc[kRowBlock] = {};
    for (int b = 0; b * kLutQuantBlock < m.n_vectors; ++b) {
      const int v_begin = b * kLutQuantBlock;
      const int v_end = std::min(m.n_vectors, v_begin + kLutQuantBlock);
      // int16 sums of each 32-row half in vpunpck order: lo holds rows 0-7 and 16-23, hi 8-15 and 24-31.
      __m256i sum[2][2] = {{_mm256_setzero_si256(), _mm256_setzero_si256()},
                           {_mm256_setzero_si256(), _mm256_setzero_si256()}};
      for (int v = v_begin; v < v_end; ++v) {
        const std::uint8_t* run = block + static_cast<std::int64_t>(v) * kRowBlock * kRun;
        _mm_prefetch(reinterpret_cast<const char*>(run + 16 * kRowBlock * kRun), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(run + 16 * kRowBlock * kRun + 64), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(run + 16 * kRowBlock * kRun + 128), _MM_HINT_T0);
        const __m256i* t = &tables[std::size_t(v) * 16];
        for (int h = 0; h < 2; ++h) {
          const StageIndex idx = split_indices(run + h * 32 * kRun, masks);
          const __m256i r0v = lookup64(t + 0, idx.i[0]);
          const __m256i r1v = lookup64(t + 4, idx.i[1]);
          const __m256i r2v = lookup64(t + 8, idx.i[2]);
          const __m256i r3v = lookup64(t + 12, idx.i[3]);
          sum[h][0] = _mm256_add_epi16(sum[h][0], _mm256_add_epi16(_mm256_maddubs_epi16(ones, _mm256_unpacklo_epi8(r0v, r1v)),
                                                                   _mm256_maddubs_epi16(ones, _mm256_unpacklo_epi8(r2v, r3v))));
          sum[h][1] = _mm256_add_epi16(sum[h][1], _mm256_add_epi16(_mm256_maddubs_epi16(ones, _mm256_unpackhi_epi8(r0v, r1v)),
                                                                   _mm256_maddubs_epi16(ones, _mm256_unpackhi_epi8(r2v, r3v))));
        }
      }
      const __m256 scale = _mm256_set1_ps(block_scales[b]);
      for (int h = 0; h < 2; ++h) {
        // Rows 0-7, 8-15, 16-23, 24-31 of the half.
        const __m256i rows[4] = {_mm256_cvtepi16_epi32(_mm256_castsi256_si128(sum[h][0])),
                                 _mm256_cvtepi16_epi32(_mm256_castsi256_si128(sum[h][1])),
                                 _mm256_cvtepi16_epi32(_mm256_extracti128_si256(sum[h][0], 1)),
                                 _mm256_cvtepi16_epi32(_mm256_extracti128_si256(sum[h][1], 1))};
        for (int g = 0; g < 4; ++g) {
          float* a = acc + 32 * h + 8 * g;
          _mm256_store_ps(a, _mm256_add_ps(_mm256_load_ps(a), _mm256_mul_ps(scale, _mm256_cvtepi32_ps(rows[g]))));
        }
      }
    }
    const int valid = std::min(kRowBlock, row_end - r0);
    for (int k = 0; k < valid; ++k) y[r0 + k] = acc[k] * fp16_to_f32(load_u16(m.scales, r0 + k));
  }
}

}  // namespace waste::kernels::detail::avx2_impl

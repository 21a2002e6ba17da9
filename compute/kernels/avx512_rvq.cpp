// AVX-512 (F/BW/VL/DQ) RVQ kernels, bit-identical to generic.cpp (docs/design/dispatch.md):
// every lane does generic's operations in generic's order, mul then add, no FMA.
//
// rvq_apply: 16 rows per gather. For each vector position v the LUT slice (stages x entries
//   f32, 3 KiB for VQ3R) is used by every row of a tile of up to kTileBlocks index blocks before
//   moving on, so each slice is pulled into L1 once per tile instead of once per 64 rows; the
//   row accumulators live in a small L1 array. The stage bytes of 16 rows (16 runs of S bytes)
//   become int32 gather indices with one dword permute (4 rows' runs per 128-bit lane) and one
//   zero-filling byte shuffle per stage. The index streams are prefetched kRvqPrefetchAhead
//   positions ahead (kernel_impl.hpp).
// rvq_apply_vq4p: the 64-entry int8 stage table widened to int16 sits in two registers and is
//   looked up 32 rows at a time with vpermt2w (AVX-512BW), no gathers.
// rvq_lut_build: 2 x 16 entries per step (centroid columns gathered once per 32 entries).
// rvq_lut_quantize: VQ4P's int8 tables, 16 entries per step (AVX2 took 8).
// GCC 12 flags its own _mm512_undefined_* inside the widening intrinsics (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "compute/kernels/avx512_rvq.hpp"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cassert>
#include <cstdint>
#include <cstring>

#include "compute/kernels/avx512_common.hpp"
#include "compute/kernels/kernel_impl.hpp"

namespace waste::kernels::detail::avx512_impl {
namespace {

constexpr int kTileBlocks = kRvqTileBlocks;

// fp16 row scales of 16 rows at i, decoded exactly like fp16_to_f32 (avx512_common.hpp);
// `valid` rows are read (the rest are 0).
inline __m512 row_scales16(const std::uint16_t* scales, std::int64_t i, int valid) {
  return avx512_common::fp16x16_to_f32(reinterpret_cast<const unsigned char*>(scales) + 2 * i, valid);
}

// Index extraction for 16 rows whose runs of S bytes sit back to back (16*S bytes): `perm` puts
// rows 4j..4j+3 (dwords S*j .. S*j+S-1) into 128-bit lane j; shuf[s] moves row k's stage-s byte
// to the low byte of dword k and zeroes the other three.
template <int S>
struct RunExtract {
  std::array<std::int32_t, 16> perm{};
  std::array<std::array<std::int8_t, 64>, S> shuf{};
  constexpr RunExtract() {
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 4; ++i) perm[4 * j + i] = i < S ? S * j + i : 0;
    }
    for (int s = 0; s < S; ++s) {
      for (int lane = 0; lane < 4; ++lane) {
        for (int b = 0; b < 16; ++b) {
          const int k = b / 4;
          shuf[s][16 * lane + b] = b % 4 == 0 ? static_cast<std::int8_t>(k * S + s) : std::int8_t{-128};
        }
      }
    }
  }
};

template <int S>
void apply_stages(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin,
                  int row_end) {
  static constexpr RunExtract<S> kExtract{};
  constexpr __mmask16 kRunDwords = static_cast<__mmask16>((1u << (4 * S)) - 1u);
  const __m512i perm = _mm512_loadu_si512(kExtract.perm.data());
  __m512i shuf[S];
  for (int s = 0; s < S; ++s) shuf[s] = _mm512_loadu_si512(kExtract.shuf[s].data());

  const std::int64_t per_vector = static_cast<std::int64_t>(S) * entries;
  const std::int64_t block_bytes = static_cast<std::int64_t>(m.n_vectors) * kRowBlock * S;
  alignas(64) float acc[kTileBlocks * kRowBlock];

  const int tile = rvq_tile_rows(row_begin, row_end);
  for (int t0 = row_begin; t0 < row_end; t0 += tile) {
    const int t1 = std::min(row_end, t0 + tile);
    // Groups of 16 rows; a last partial group reads the block's padding rows (always present)
    // and its extra lanes are never stored.
    const int n_groups = (t1 - t0 + 15) / 16;
    const std::uint8_t* tile_index = m.index + static_cast<std::int64_t>(t0 / kRowBlock) * block_bytes;
    for (int g = 0; g < n_groups; ++g) _mm512_store_ps(acc + 16 * g, _mm512_setzero_ps());
    const int tile_blocks = (t1 - t0 + kRowBlock - 1) / kRowBlock;
    for (int v = 0; v < std::min(kRvqPrefetchAhead, m.n_vectors); ++v) {
      rvq_prefetch_runs<S>(tile_index + static_cast<std::int64_t>(v) * kRowBlock * S, block_bytes, tile_blocks);
    }
    for (int v = 0; v < m.n_vectors; ++v) {
      const float* lut_v = lut + v * per_vector;
      const std::uint8_t* runs_v = tile_index + static_cast<std::int64_t>(v) * kRowBlock * S;
      if (v + kRvqPrefetchAhead < m.n_vectors) {
        rvq_prefetch_runs<S>(runs_v + kRvqPrefetchAhead * kRowBlock * S, block_bytes, tile_blocks);
      }
      for (int g = 0; g < n_groups; ++g) {
        // Group g: block g/4 of the tile, rows 16*(g%4).. of that block.
        const std::uint8_t* runs = runs_v + (g >> 2) * block_bytes + (g & 3) * 16 * S;
        const __m512i raw =
            _mm512_permutexvar_epi32(perm, _mm512_maskz_loadu_epi32(kRunDwords, runs));
        __m512 term = _mm512_i32gather_ps(_mm512_shuffle_epi8(raw, shuf[0]), lut_v, 4);
        for (int s = 1; s < S; ++s) {
          term = _mm512_add_ps(
              term, _mm512_i32gather_ps(_mm512_shuffle_epi8(raw, shuf[s]), lut_v + s * entries, 4));
        }
        _mm512_store_ps(acc + 16 * g, _mm512_add_ps(_mm512_load_ps(acc + 16 * g), term));
      }
    }
    for (int g = 0; g < n_groups; ++g) {
      const int r = t0 + 16 * g;
      const int valid = std::min(16, t1 - r);
      const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
      const __m512 out = _mm512_mul_ps(_mm512_load_ps(acc + 16 * g), row_scales16(m.scales, r, valid));
      _mm512_mask_storeu_ps(y + r, mask, out);
    }
  }
}

// VQ4P run decode for 32 rows (96 bytes): rows 0..15 in a, 16..31 in b, each laid out by the
// 3-byte RunExtract permute (4 rows per 128-bit lane). Word 8j+i of the results is row 4j+i for
// i < 4 and row 16+4j+i-4 for i >= 4; `natural` undoes that at the end of a LUT block.
struct Vq4pExtract {
  std::array<std::int8_t, 64> w01{};  // word = b0 | b1 << 8
  std::array<std::int8_t, 64> w12{};  // word = b1 | b2 << 8
  std::array<std::int16_t, 32> natural{};
  constexpr Vq4pExtract() {
    for (int lane = 0; lane < 4; ++lane) {
      for (int i = 0; i < 8; ++i) {
        const int k = i % 4;  // row within the lane's 4 rows (of a for i < 4, of b otherwise)
        w01[16 * lane + 2 * i] = static_cast<std::int8_t>(3 * k);
        w01[16 * lane + 2 * i + 1] = static_cast<std::int8_t>(3 * k + 1);
        w12[16 * lane + 2 * i] = static_cast<std::int8_t>(3 * k + 1);
        w12[16 * lane + 2 * i + 1] = static_cast<std::int8_t>(3 * k + 2);
      }
    }
    for (int row = 0; row < 32; ++row) {
      const int half = row / 16, j = (row % 16) / 4, i = row % 4;
      natural[row] = static_cast<std::int16_t>(8 * j + 4 * half + i);
    }
  }
};

}  // namespace

void rvq_apply(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin,
               int row_end) {
  assert(row_begin % kRowBlock == 0);
  switch (m.stages) {
    case 1: apply_stages<1>(m, lut, entries, y, row_begin, row_end); return;
    case 2: apply_stages<2>(m, lut, entries, y, row_begin, row_end); return;
    case 3: apply_stages<3>(m, lut, entries, y, row_begin, row_end); return;
    case 4: apply_stages<4>(m, lut, entries, y, row_begin, row_end); return;
    default: generic_impl::rvq_apply(m, lut, entries, y, row_begin, row_end); return;
  }
}

void rvq_apply_vq4p(const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales,
                    float* y, int row_begin, int row_end) {
  assert(row_begin % kRowBlock == 0);
  static constexpr RunExtract<3> kRuns{};
  static constexpr Vq4pExtract kVq4p{};
  constexpr int kPerVector = 4 * 64;
  constexpr int kRun = 3;
  constexpr int kTileGroups = kTileBlocks * kRowBlock / 32;
  const __m512i perm = _mm512_loadu_si512(kRuns.perm.data());
  const __m512i w01 = _mm512_loadu_si512(kVq4p.w01.data());
  const __m512i w12 = _mm512_loadu_si512(kVq4p.w12.data());
  const __m512i natural = _mm512_loadu_si512(kVq4p.natural.data());
  constexpr __mmask64 kUpperHalves = 0xFF00FF00FF00FF00ull;  // bytes 8..15 of each lane come from b
  const std::int64_t block_bytes = static_cast<std::int64_t>(m.n_vectors) * kRowBlock * kRun;
  alignas(64) float acc[kTileBlocks * kRowBlock];
  alignas(64) std::int16_t sums[kTileGroups * 32];

  const int tile = rvq_tile_rows(row_begin, row_end);
  for (int t0 = row_begin; t0 < row_end; t0 += tile) {
    const int t1 = std::min(row_end, t0 + tile);
    const int n_groups = (t1 - t0 + 31) / 32;  // 32 rows each; padding rows as in rvq_apply
    const std::uint8_t* tile_index = m.index + static_cast<std::int64_t>(t0 / kRowBlock) * block_bytes;
    for (int g = 0; g < 2 * n_groups; ++g) _mm512_store_ps(acc + 16 * g, _mm512_setzero_ps());
    const int tile_blocks = (t1 - t0 + kRowBlock - 1) / kRowBlock;
    for (int v = 0; v < std::min(kRvqPrefetchAhead, m.n_vectors); ++v) {
      rvq_prefetch_runs<kRun>(tile_index + static_cast<std::int64_t>(v) * kRowBlock * kRun, block_bytes, tile_blocks);
    }
    for (int b = 0; b * kLutQuantBlock < m.n_vectors; ++b) {
      const int v_begin = b * kLutQuantBlock;
      const int v_end = std::min(m.n_vectors, v_begin + kLutQuantBlock);
      for (int g = 0; g < n_groups; ++g) _mm512_store_si512(sums + 32 * g, _mm512_setzero_si512());
      for (int v = v_begin; v < v_end; ++v) {
        // The four stage tables as int16: entries 0..31 in lo, 32..63 in hi.
        const std::int8_t* t = lut_q + static_cast<std::int64_t>(v) * kPerVector;
        __m512i lo[4], hi[4];
        for (int s = 0; s < 4; ++s) {
          lo[s] = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 64 * s)));
          hi[s] = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 64 * s + 32)));
        }
        const std::uint8_t* runs_v = tile_index + static_cast<std::int64_t>(v) * kRowBlock * kRun;
        if (v + kRvqPrefetchAhead < m.n_vectors) {
          rvq_prefetch_runs<kRun>(runs_v + kRvqPrefetchAhead * kRowBlock * kRun, block_bytes, tile_blocks);
        }
        for (int g = 0; g < n_groups; ++g) {
          const std::uint8_t* runs = runs_v + (g >> 1) * block_bytes + (g & 1) * 32 * kRun;
          const __m512i a = _mm512_permutexvar_epi32(perm, _mm512_maskz_loadu_epi32(0x0FFF, runs));
          const __m512i c = _mm512_permutexvar_epi32(perm, _mm512_maskz_loadu_epi32(0x0FFF, runs + 48));
          const __m512i x01 = _mm512_mask_shuffle_epi8(_mm512_shuffle_epi8(a, w01), kUpperHalves, c, w01);
          const __m512i x12 = _mm512_mask_shuffle_epi8(_mm512_shuffle_epi8(a, w12), kUpperHalves, c, w12);
          // vpermt2w reads the low 6 bits of each index word: the stage fields need no mask.
          __m512i sum = _mm512_load_si512(sums + 32 * g);
          sum = _mm512_add_epi16(sum, _mm512_permutex2var_epi16(lo[0], x01, hi[0]));
          sum = _mm512_add_epi16(sum, _mm512_permutex2var_epi16(lo[1], _mm512_srli_epi16(x01, 6), hi[1]));
          sum = _mm512_add_epi16(sum, _mm512_permutex2var_epi16(lo[2], _mm512_srli_epi16(x12, 4), hi[2]));
          sum = _mm512_add_epi16(sum, _mm512_permutex2var_epi16(lo[3], _mm512_srli_epi16(x12, 10), hi[3]));
          _mm512_store_si512(sums + 32 * g, sum);
        }
      }
      // acc += block_scale * sum per row (mul then add, as generic).
      const __m512 scale = _mm512_set1_ps(block_scales[b]);
      for (int g = 0; g < n_groups; ++g) {
        const __m512i ordered = _mm512_permutexvar_epi16(natural, _mm512_load_si512(sums + 32 * g));
        const __m512 s0 = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm512_castsi512_si256(ordered)));
        const __m512 s1 = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(ordered, 1)));
        float* a = acc + 32 * g;
        _mm512_store_ps(a, _mm512_add_ps(_mm512_load_ps(a), _mm512_mul_ps(scale, s0)));
        _mm512_store_ps(a + 16, _mm512_add_ps(_mm512_load_ps(a + 16), _mm512_mul_ps(scale, s1)));
      }
    }
    for (int g = 0; g < 2 * n_groups; ++g) {
      const int r = t0 + 16 * g;
      const int valid = std::clamp(t1 - r, 0, 16);
      if (valid == 0) break;
      const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
      const __m512 out = _mm512_mul_ps(_mm512_load_ps(acc + 16 * g), row_scales16(m.scales, r, valid));
      _mm512_mask_storeu_ps(y + r, mask, out);
    }
  }
}

void rvq_lut_to_q16(float* lut, int stages, int entries, int v_begin, int v_end) {
  const int per_vector = stages * entries;
  if (entries % 16 != 0 || per_vector > kLutQ16MaxSlot) {
    generic_impl::rvq_lut_to_q16(lut, stages, entries, v_begin, v_end);
    return;
  }
  for (int v = v_begin; v < v_end; ++v) {
    float* slot = lut + static_cast<std::int64_t>(v) * per_vector;
    float total = 0.0f;  // stages ascending, as generic
    for (int s = 0; s < stages; ++s) {
      __m512 mx = _mm512_setzero_ps();
      for (int e = 0; e < entries; e += 16) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(slot + s * entries + e)));
      total += _mm512_reduce_max_ps(mx);  // max is exact in any order
    }
    const __m512 inverse = _mm512_set1_ps(total > 0.0f ? kLutQ16Range / total : 0.0f);
    const float scale = total / kLutQ16Range;
    // In place, ascending: 16 int16s go to bytes [2i, 2i + 32), below the floats still to be read.
    auto* q = reinterpret_cast<unsigned char*>(slot);
    for (int i = 0; i < per_vector; i += 16) {
      const __m512i rounded = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(slot + i), inverse));  // half to even
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 2 * i), _mm512_cvtsepi32_epi16(rounded));
    }
    std::memcpy(q + 2 * per_vector, &scale, sizeof scale);
  }
}

void rvq_lut_build(const float* x, const float* const* books, int stages, int entries, int vec_dim,
                   int v_begin, int v_end, float* lut) {
  if (vec_dim != 8 || entries % 32 != 0) {
    generic_impl::rvq_lut_build(x, books, stages, entries, vec_dim, v_begin, v_end, lut);
    return;
  }
  const std::int64_t per_vector = static_cast<std::int64_t>(stages) * entries;
  // Lane k of the column gather reads component d of entry e0 + k.
  const __m512i column_index = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(8));
  for (int s = 0; s < stages; ++s) {
    for (int e0 = 0; e0 < entries; e0 += 32) {
      // col_a[d] / col_b[d]: component d of entries e0..e0+15 / e0+16..e0+31.
      __m512 col_a[8], col_b[8];
      const float* base = books[s] + static_cast<std::int64_t>(e0) * 8;
      for (int d = 0; d < 8; ++d) {
        col_a[d] = _mm512_i32gather_ps(column_index, base + d, 4);
        col_b[d] = _mm512_i32gather_ps(column_index, base + 128 + d, 4);
      }
      float* out = lut + static_cast<std::int64_t>(s) * entries + e0;
      for (int v = v_begin; v < v_end; ++v) {
        const float* xv = x + static_cast<std::int64_t>(v) * 8;
        __m512 acc_a = _mm512_setzero_ps(), acc_b = _mm512_setzero_ps();
        for (int d = 0; d < 8; ++d) {  // generic's order: acc += x[d] * c[d], d ascending
          const __m512 xd = _mm512_set1_ps(xv[d]);
          acc_a = _mm512_add_ps(acc_a, _mm512_mul_ps(xd, col_a[d]));
          acc_b = _mm512_add_ps(acc_b, _mm512_mul_ps(xd, col_b[d]));
        }
        _mm512_storeu_ps(out + v * per_vector, acc_a);
        _mm512_storeu_ps(out + v * per_vector + 16, acc_b);
      }
    }
  }
}

// generic's quantisation, 16 entries per step: the block's max |entry| (max is exact in any
// order), the same rounded inverse, each entry times it rounded half to even, clamped to +-127, and
// narrowed with signed saturation (a no-op after the clamp).
void rvq_lut_quantize(const float* lut, int n_vectors, int stages, int entries, std::int8_t* lut_q,
                      float* block_scales) {
  const std::int64_t per_vector = static_cast<std::int64_t>(stages) * entries;
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (int b = 0; b * kLutQuantBlock < n_vectors; ++b) {
    const int v_end = std::min(n_vectors, (b + 1) * kLutQuantBlock);
    const std::int64_t begin = static_cast<std::int64_t>(b) * kLutQuantBlock * per_vector;
    const std::int64_t end = static_cast<std::int64_t>(v_end) * per_vector;
    __m512 vmax0 = _mm512_setzero_ps(), vmax1 = _mm512_setzero_ps();
    std::int64_t i = begin;
    for (; i + 32 <= end; i += 32) {
      vmax0 = _mm512_max_ps(vmax0, _mm512_abs_ps(_mm512_loadu_ps(lut + i)));
      vmax1 = _mm512_max_ps(vmax1, _mm512_abs_ps(_mm512_loadu_ps(lut + i + 16)));
    }
    float mx = _mm512_reduce_max_ps(_mm512_max_ps(vmax0, vmax1));
    for (; i < end; ++i) mx = std::max(mx, std::fabs(lut[i]));
    const float inverse = mx > 0.0f ? 127.0f / mx : 0.0f;
    block_scales[b] = mx / 127.0f;
    const __m512 vinv = _mm512_set1_ps(inverse);
    i = begin;
    for (; i + 16 <= end; i += 16) {
      const __m512 q = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(lut + i), vinv),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i n = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(q, lo), hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(lut_q + i), _mm512_cvtsepi32_epi8(n));
    }
    for (; i < end; ++i) {
      const float q = std::nearbyint(lut[i] * inverse);
      lut_q[i] = static_cast<std::int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
}

}  // namespace waste::kernels::detail::avx512_impl

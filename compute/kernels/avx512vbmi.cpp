// AVX-512 with VBMI + VNNI (Ice Lake and later, Zen 4): the AVX-512 table with a VQ4P apply whose
// stage lookups are byte permutes from registers, bit-identical to generic (integer sums are exact
// in any order; acc += block_scale * sum per row, mul then add, as generic).
//
// rvq_apply_vq4p, per 16 rows and vector position: the 16 runs of 3 bytes (48 bytes) go to one
//   dword per row (vpermb), vpmultishiftqb pulls the four 6-bit fields of each row into its four
//   bytes (stage s in byte s), and one vpternlogd keeps the 6 bits and sets bit 6 on stages 1 and
//   3. Two vpermi2b then look every byte up in the stage tables taken two at a time (stages 0|1
//   and 2|3: 128 int8 entries in two registers, bit 6 picks the stage), and two vpdpbusd add
//   each row's four looked-up int8 values into its int32 sum (a 0/1 byte mask selects the stages
//   each lookup answered). Rows stay in their natural order; no gathers, no widening.
// GCC 12 flags its own _mm512_undefined_* inside the widening intrinsics (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cstdint>

#include "compute/kernels/avx2.hpp"
#include "compute/kernels/avx512_common.hpp"
#include "compute/kernels/avx512_rvq.hpp"
#include "compute/kernels/kernel_impl.hpp"

namespace waste::kernels::detail {
namespace avx512vbmi_impl {
namespace {

constexpr int kRun = 3;           // bytes per row and vector position (four 6-bit indices)
constexpr int kPerVector = 4 * 64;  // int8 LUT entries per vector position

struct Vq4pBytes {
  std::array<std::int8_t, 64> spread{};  // byte 4k+j <- run byte 3k+j (j = 3 repeats byte 2)
  std::array<std::int8_t, 64> fields{};  // per qword: bit offsets of the 4 fields of its 2 rows
  constexpr Vq4pBytes() {
    for (int k = 0; k < 16; ++k) {
      for (int j = 0; j < 4; ++j) spread[4 * k + j] = static_cast<std::int8_t>(3 * k + std::min(j, 2));
    }
    for (int q = 0; q < 8; ++q) {
      for (int j = 0; j < 8; ++j) fields[8 * q + j] = static_cast<std::int8_t>(32 * (j / 4) + 6 * (j % 4));
    }
  }
};

}  // namespace

void rvq_apply_vq4p(const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales, float* y,
                    int row_begin, int row_end) {
  assert(row_begin % kRowBlock == 0);
  static constexpr Vq4pBytes kBytes{};
  constexpr int kTileGroups = kRvqTileBlocks * kRowBlock / 16;
  const __m512i spread = _mm512_loadu_si512(kBytes.spread.data());
  const __m512i fields = _mm512_loadu_si512(kBytes.fields.data());
  const __m512i low6 = _mm512_set1_epi8(0x3F);
  const __m512i odd_stage = _mm512_set1_epi32(0x40004000);
  const __m512i stages01 = _mm512_set1_epi32(0x00000101);  // u8 weights of the 0|1 lookup
  const __m512i stages23 = _mm512_set1_epi32(0x01010000);
  constexpr __mmask64 kRunBytes = (__mmask64{1} << (16 * kRun)) - 1;
  const std::int64_t block_bytes = static_cast<std::int64_t>(m.n_vectors) * kRowBlock * kRun;
  alignas(64) float acc[kTileGroups * 16];
  alignas(64) std::int32_t sums[kTileGroups * 16];

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
      rvq_prefetch_runs<kRun>(tile_index + static_cast<std::int64_t>(v) * kRowBlock * kRun, block_bytes, tile_blocks);
    }
    for (int b = 0; b * kLutQuantBlock < m.n_vectors; ++b) {
      const int v_begin = b * kLutQuantBlock;
      const int v_end = std::min(m.n_vectors, v_begin + kLutQuantBlock);
      for (int g = 0; g < n_groups; ++g) _mm512_store_si512(sums + 16 * g, _mm512_setzero_si512());
      for (int v = v_begin; v < v_end; ++v) {
        const std::int8_t* t = lut_q + static_cast<std::int64_t>(v) * kPerVector;
        const __m512i t0_tab = _mm512_loadu_si512(t);
        const __m512i t1_tab = _mm512_loadu_si512(t + 64);
        const __m512i t2_tab = _mm512_loadu_si512(t + 128);
        const __m512i t3_tab = _mm512_loadu_si512(t + 192);
        const std::uint8_t* runs_v = tile_index + static_cast<std::int64_t>(v) * kRowBlock * kRun;
        if (v + kRvqPrefetchAhead < m.n_vectors) {
          rvq_prefetch_runs<kRun>(runs_v + kRvqPrefetchAhead * kRowBlock * kRun, block_bytes, tile_blocks);
        }
        for (int g = 0; g < n_groups; ++g) {
          // Group g: block g/4 of the tile, rows 16*(g%4).. of that block.
          const std::uint8_t* runs = runs_v + (g >> 2) * block_bytes + (g & 3) * 16 * kRun;
          const __m512i words = _mm512_permutexvar_epi8(spread, _mm512_maskz_loadu_epi8(kRunBytes, runs));
          const __m512i raw = _mm512_multishift_epi64_epi8(fields, words);
          // (raw & 63) | bit 6 on odd stages: a index into the two-stage table pair.
          const __m512i idx = _mm512_ternarylogic_epi32(raw, low6, odd_stage, 0xEA);
          __m512i sum = _mm512_load_si512(sums + 16 * g);
          sum = _mm512_dpbusd_epi32(sum, stages01, _mm512_permutex2var_epi8(t0_tab, idx, t1_tab));
          sum = _mm512_dpbusd_epi32(sum, stages23, _mm512_permutex2var_epi8(t2_tab, idx, t3_tab));
          _mm512_store_si512(sums + 16 * g, sum);
        }
      }
      // acc += block_scale * sum per row (mul then add, as generic).
      const __m512 scale = _mm512_set1_ps(block_scales[b]);
      for (int g = 0; g < n_groups; ++g) {
        const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(sums + 16 * g));
        _mm512_store_ps(acc + 16 * g, _mm512_add_ps(_mm512_load_ps(acc + 16 * g), _mm512_mul_ps(scale, s)));
      }
    }
    for (int g = 0; g < n_groups; ++g) {
      const int r = t0 + 16 * g;
      const int valid = std::min(16, t1 - r);
      const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
      const __m512 scales = avx512_common::fp16x16_to_f32(reinterpret_cast<const unsigned char*>(m.scales) + 2 * std::int64_t(r), valid);
      _mm512_mask_storeu_ps(y + r, mask, _mm512_mul_ps(_mm512_load_ps(acc + 16 * g), scales));
    }
  }
}

}  // namespace avx512vbmi_impl

const KernelTable& avx512vbmi_table() {
  static const KernelTable table = [] {
    KernelTable t = avx512_table();
    t.isa = "avx512vbmi";
    t.rvq_apply_vq4p = avx512vbmi_impl::rvq_apply_vq4p;
    return t;
  }();
  return table;
}

}  // namespace waste::kernels::detail

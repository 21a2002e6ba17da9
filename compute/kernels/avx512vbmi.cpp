// AVX-512 with VBMI (Ice Lake and later, Zen 4): the AVX-512 table with a VQ4P apply whose stage
// lookups are byte permutes from registers, bit-identical to generic (integer sums are exact in
// any order; acc += block_scale * sum per row, mul then add, as generic). Two such applies: the
// byte planes below (64 rows per lookup), and the stage pairs of avx512vbmi_pairs.cpp, which the
// table takes on AMD CPUs with VNNI (`vq4p_by_pairs`).
//
// rvq_apply_vq4p, per 64-row block and vector position: the block's 64 runs of 3 bytes (192
//   contiguous bytes, three loads) become three byte planes B_j[k] = run byte j of row k, each by
//   three merge-masked vpermb with one index vector (3k + j mod 64). The four 6-bit fields are
//   then word shifts of the planes (stage 0 = B0, 1 = B0 >> 6 | B1 << 2, 2 = B1 >> 4 | B2 << 4,
//   3 = B2 >> 2; bits a word shift carries over from the neighbouring byte land in bits 6-7 or in
//   the bits vpternlogd takes from the other plane, and vpermb reads only bits 0-5). One vpermb
//   per stage looks 64 rows up in the stage's 64-entry int8 table, and the looked-up bytes are
//   summed as int16 in two halves without a lane-crossing widen: even rows by vpmaddubsw with
//   byte weights (1, 0), odd rows by an arithmetic word shift right by 8. The even/odd row order
//   is undone once per tile, when y is written (unpack + vpermt2ps).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cstdint>
#include <cstring>

#include "compute/kernels/avx2.hpp"
#include "compute/kernels/avx512_common.hpp"
#include "compute/kernels/avx512_rvq.hpp"
#include "compute/kernels/kernel_impl.hpp"

namespace waste::kernels::detail {
namespace avx512vbmi_impl {
namespace {

constexpr int kRun = 3;             // bytes per row and vector position (four 6-bit indices)
constexpr int kPerVector = 4 * 64;  // int8 LUT entries per vector position

// Byte k of plane j is run byte 3k + j of the 192: register (3k + j) / 64, byte (3k + j) % 64.
struct PlaneIndex {
  std::array<std::array<std::int8_t, 64>, 3> index{};
  std::array<std::array<std::uint64_t, 3>, 3> mask{};  // [plane][register]
  constexpr PlaneIndex() {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 64; ++k) {
        const int byte = 3 * k + j;
        index[j][k] = static_cast<std::int8_t>(byte % 64);
        mask[j][byte / 64] |= std::uint64_t{1} << k;
      }
    }
  }
};

// Rows 0..63 in natural order from the even (rows 0, 2, ..) and odd (1, 3, ..) accumulators of
// each half: unpacklo/hi interleave within 128-bit lanes (lane L: rows 8L..8L+3 and 8L+4..8L+7),
// vpermt2ps puts the lanes in order.
inline void store_natural(__m512 even_lo, __m512 odd_lo, __m512 even_hi, __m512 odd_hi, float* out) {
  const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int h = 0; h < 2; ++h) {
    const __m512 e = h == 0 ? even_lo : even_hi, o = h == 0 ? odd_lo : odd_hi;
    const __m512 lo = _mm512_unpacklo_ps(e, o), hi = _mm512_unpackhi_ps(e, o);
    _mm512_store_ps(out + 32 * h, _mm512_permutex2var_ps(lo, first, hi));
    _mm512_store_ps(out + 32 * h + 16, _mm512_permutex2var_ps(lo, second, hi));
  }
}

}  // namespace

void rvq_apply_vq4p(const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales, float* y,
                    int row_begin, int row_end) {
  assert(row_begin % kRowBlock == 0);
  static constexpr PlaneIndex kPlanes{};
  __m512i plane_index[3];
  __mmask64 plane_mask[3][3];
  for (int j = 0; j < 3; ++j) {
    plane_index[j] = _mm512_loadu_si512(kPlanes.index[j].data());
    for (int z = 0; z < 3; ++z) plane_mask[j][z] = kPlanes.mask[j][z];
  }
  const __m512i low2 = _mm512_set1_epi8(0x03);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i even_weights = _mm512_set1_epi16(0x0001);  // u8 (1, 0): the even byte of each word
  const std::int64_t block_bytes = static_cast<std::int64_t>(m.n_vectors) * kRowBlock * kRun;
  // Per block of the tile: int16 sums (even rows, odd rows) and f32 accumulators (even, odd; 32 each).
  alignas(64) std::int16_t sums[kRvqTileBlocks * 2 * 32];
  alignas(64) float acc[kRvqTileBlocks * kRowBlock];
  alignas(64) float natural[kRowBlock];

  const int tile = rvq_tile_rows(row_begin, row_end);
  for (int t0 = row_begin; t0 < row_end; t0 += tile) {
    const int t1 = std::min(row_end, t0 + tile);
    const int tile_blocks = (t1 - t0 + kRowBlock - 1) / kRowBlock;  // a last partial block reads its padding rows
    const std::uint8_t* tile_index = m.index + static_cast<std::int64_t>(t0 / kRowBlock) * block_bytes;
    for (int i = 0; i < tile_blocks * 4; ++i) _mm512_store_ps(acc + 16 * i, _mm512_setzero_ps());
    for (int v = 0; v < std::min(kRvqPrefetchAhead, m.n_vectors); ++v) {
      rvq_prefetch_runs<kRun>(tile_index + static_cast<std::int64_t>(v) * kRowBlock * kRun, block_bytes, tile_blocks);
    }
    for (int b = 0; b * kLutQuantBlock < m.n_vectors; ++b) {
      const int v_begin = b * kLutQuantBlock;
      const int v_end = std::min(m.n_vectors, v_begin + kLutQuantBlock);
      for (int i = 0; i < tile_blocks * 2; ++i) _mm512_store_si512(sums + 32 * i, _mm512_setzero_si512());
      for (int v = v_begin; v < v_end; ++v) {
        const std::int8_t* t = lut_q + static_cast<std::int64_t>(v) * kPerVector;
        const __m512i table0 = _mm512_loadu_si512(t);
        const __m512i table1 = _mm512_loadu_si512(t + 64);
        const __m512i table2 = _mm512_loadu_si512(t + 128);
        const __m512i table3 = _mm512_loadu_si512(t + 192);
        const std::uint8_t* runs_v = tile_index + static_cast<std::int64_t>(v) * kRowBlock * kRun;
        if (v + kRvqPrefetchAhead < m.n_vectors) {
          rvq_prefetch_runs<kRun>(runs_v + kRvqPrefetchAhead * kRowBlock * kRun, block_bytes, tile_blocks);
        }
        for (int blk = 0; blk < tile_blocks; ++blk) {
          const std::uint8_t* runs = runs_v + blk * block_bytes;
          const __m512i z0 = _mm512_loadu_si512(runs);
          const __m512i z1 = _mm512_loadu_si512(runs + 64);
          const __m512i z2 = _mm512_loadu_si512(runs + 128);
          __m512i plane[3];
          for (int j = 0; j < 3; ++j) {
            __m512i p = _mm512_maskz_permutexvar_epi8(plane_mask[j][0], plane_index[j], z0);
            p = _mm512_mask_permutexvar_epi8(p, plane_mask[j][1], plane_index[j], z1);
            plane[j] = _mm512_mask_permutexvar_epi8(p, plane_mask[j][2], plane_index[j], z2);
          }
          // (a & c) | (b & ~c): the low bits from a, the rest from b.
          const __m512i s1 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(plane[0], 6), _mm512_slli_epi16(plane[1], 2), low2, 0xE4);
          const __m512i s2 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(plane[1], 4), _mm512_slli_epi16(plane[2], 4), low4, 0xE4);
          const __m512i s3 = _mm512_srli_epi16(plane[2], 2);
          const __m512i l0 = _mm512_permutexvar_epi8(plane[0], table0);
          const __m512i l1 = _mm512_permutexvar_epi8(s1, table1);
          const __m512i l2 = _mm512_permutexvar_epi8(s2, table2);
          const __m512i l3 = _mm512_permutexvar_epi8(s3, table3);
          const __m512i even = _mm512_add_epi16(
              _mm512_add_epi16(_mm512_maddubs_epi16(even_weights, l0), _mm512_maddubs_epi16(even_weights, l1)),
              _mm512_add_epi16(_mm512_maddubs_epi16(even_weights, l2), _mm512_maddubs_epi16(even_weights, l3)));
          const __m512i odd = _mm512_add_epi16(
              _mm512_add_epi16(_mm512_srai_epi16(l0, 8), _mm512_srai_epi16(l1, 8)),
              _mm512_add_epi16(_mm512_srai_epi16(l2, 8), _mm512_srai_epi16(l3, 8)));
          std::int16_t* sb = sums + 64 * blk;
          _mm512_store_si512(sb, _mm512_add_epi16(_mm512_load_si512(sb), even));
          _mm512_store_si512(sb + 32, _mm512_add_epi16(_mm512_load_si512(sb + 32), odd));
        }
      }
      // acc += block_scale * sum per row (mul then add, as generic); acc holds even rows then odd.
      const __m512 scale = _mm512_set1_ps(block_scales[b]);
      for (int i = 0; i < tile_blocks * 2; ++i) {
        const __m512i s = _mm512_load_si512(sums + 32 * i);
        const __m512 s0 = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm512_castsi512_si256(s)));
        const __m512 s1 = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(s, 1)));
        float* a = acc + 32 * i;
        _mm512_store_ps(a, _mm512_add_ps(_mm512_load_ps(a), _mm512_mul_ps(scale, s0)));
        _mm512_store_ps(a + 16, _mm512_add_ps(_mm512_load_ps(a + 16), _mm512_mul_ps(scale, s1)));
      }
    }
    for (int blk = 0; blk < tile_blocks; ++blk) {
      const float* a = acc + kRowBlock * blk;  // even rows 0..30 | 32..62, then odd
      store_natural(_mm512_load_ps(a), _mm512_load_ps(a + 32), _mm512_load_ps(a + 16), _mm512_load_ps(a + 48), natural);
      for (int q = 0; q < 4; ++q) {
        const int r = t0 + kRowBlock * blk + 16 * q;
        const int valid = std::clamp(t1 - r, 0, 16);
        if (valid == 0) break;
        const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
        const __m512 scales = avx512_common::fp16x16_to_f32(reinterpret_cast<const unsigned char*>(m.scales) + 2 * std::int64_t(r), valid);
        _mm512_mask_storeu_ps(y + r, mask, _mm512_mul_ps(_mm512_load_ps(natural + 16 * q), scales));
      }
    }
  }
}

namespace {

// rvq_apply_q16 index extraction: the 32 rows of half a block have their runs of S bytes back to
// back (32 * S bytes, two registers); word r of the result is row r's stage-s byte, zero-extended
// (one zero-masked vpermt2b per stage).
template <int S>
struct Q16Extract {
  std::array<std::array<std::int8_t, 64>, S> select{};
  constexpr Q16Extract() {
    for (int s = 0; s < S; ++s) {
      for (int r = 0; r < 32; ++r) select[s][2 * r] = static_cast<std::int8_t>(S * r + s);
    }
  }
};

// rvq_apply_q16: per tile of up to kRvqTileBlocks blocks and vector position, each stage's 256
// int16 entries sit in eight registers; 32 rows are looked up at once by four vpermt2w (entries
// 0-63, 64-127, 128-191, 192-255 by the index's low 6 bits) and two levels of blends on index
// bits 6 and 7. The stage values are summed in int16 (exact: a slot's stage sums fit, see
// kernels.hpp), then acc += scale_v * sum per row, mul then add, as generic.
template <int S>
void apply_q16_stages(const RvqMatrix& m, const float* lut, float* y, int row_begin, int row_end) {
  constexpr int kEntries = 256;
  constexpr int kPerVector = S * kEntries;
  static constexpr Q16Extract<S> kExtract{};
  __m512i select[S];
  for (int s = 0; s < S; ++s) select[s] = _mm512_loadu_si512(kExtract.select[s].data());
  constexpr __mmask64 kFirst = S >= 2 ? ~__mmask64{0} : (__mmask64{1} << (32 * S)) - 1;
  constexpr __mmask64 kSecond = S <= 2 ? 0 : S == 3 ? 0xFFFFFFFFull : ~__mmask64{0};
  constexpr __mmask64 kLowBytes = 0x5555555555555555ull;
  const __m512i bit6 = _mm512_set1_epi16(64), bit7 = _mm512_set1_epi16(128);
  const std::int64_t block_bytes = static_cast<std::int64_t>(m.n_vectors) * kRowBlock * S;
  alignas(64) float acc[kRvqTileBlocks * kRowBlock];
  alignas(64) std::int16_t sums[kRvqTileBlocks * kRowBlock];

  const int tile = rvq_tile_rows(row_begin, row_end);
  for (int t0 = row_begin; t0 < row_end; t0 += tile) {
    const int t1 = std::min(row_end, t0 + tile);
    const int tile_blocks = (t1 - t0 + kRowBlock - 1) / kRowBlock;  // a last partial block reads its padding rows
    const int n_halves = 2 * tile_blocks;
    const std::uint8_t* tile_index = m.index + static_cast<std::int64_t>(t0 / kRowBlock) * block_bytes;
    for (int i = 0; i < tile_blocks * 4; ++i) _mm512_store_ps(acc + 16 * i, _mm512_setzero_ps());
    for (int v = 0; v < std::min(kRvqPrefetchAhead, m.n_vectors); ++v) {
      rvq_prefetch_runs<S>(tile_index + static_cast<std::int64_t>(v) * kRowBlock * S, block_bytes, tile_blocks);
    }
    for (int v = 0; v < m.n_vectors; ++v) {
      const auto* slot = reinterpret_cast<const unsigned char*>(lut + static_cast<std::int64_t>(v) * kPerVector);
      const std::uint8_t* runs_v = tile_index + static_cast<std::int64_t>(v) * kRowBlock * S;
      if (v + kRvqPrefetchAhead < m.n_vectors) {
        rvq_prefetch_runs<S>(runs_v + kRvqPrefetchAhead * kRowBlock * S, block_bytes, tile_blocks);
      }
      for (int s = 0; s < S; ++s) {
        __m512i table[8];
        for (int k = 0; k < 8; ++k) table[k] = _mm512_loadu_si512(slot + 2 * (kEntries * s + 32 * k));
        for (int h = 0; h < n_halves; ++h) {
          const std::uint8_t* runs = runs_v + (h >> 1) * block_bytes + (h & 1) * 32 * S;
          const __m512i a = _mm512_maskz_loadu_epi8(kFirst, runs);
          const __m512i b = _mm512_maskz_loadu_epi8(kSecond, runs + 64);
          const __m512i w = _mm512_maskz_permutex2var_epi8(kLowBytes, a, select[s], b);
          const __m512i r0 = _mm512_permutex2var_epi16(table[0], w, table[1]);
          const __m512i r1 = _mm512_permutex2var_epi16(table[2], w, table[3]);
          const __m512i r2 = _mm512_permutex2var_epi16(table[4], w, table[5]);
          const __m512i r3 = _mm512_permutex2var_epi16(table[6], w, table[7]);
          const __mmask32 m6 = _mm512_test_epi16_mask(w, bit6);
          const __mmask32 m7 = _mm512_test_epi16_mask(w, bit7);
          const __m512i value = _mm512_mask_blend_epi16(m7, _mm512_mask_blend_epi16(m6, r0, r1),
                                                        _mm512_mask_blend_epi16(m6, r2, r3));
          std::int16_t* sh = sums + 32 * h;
          _mm512_store_si512(sh, s == 0 ? value : _mm512_add_epi16(_mm512_load_si512(sh), value));
        }
      }
      float scale_v;
      std::memcpy(&scale_v, slot + 2 * kPerVector, sizeof scale_v);
      const __m512 scale = _mm512_set1_ps(scale_v);
      for (int h = 0; h < n_halves; ++h) {
        const __m512i sh = _mm512_load_si512(sums + 32 * h);
        const __m512 s0 = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm512_castsi512_si256(sh)));
        const __m512 s1 = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(sh, 1)));
        float* ah = acc + 32 * h;
        _mm512_store_ps(ah, _mm512_add_ps(_mm512_load_ps(ah), _mm512_mul_ps(scale, s0)));
        _mm512_store_ps(ah + 16, _mm512_add_ps(_mm512_load_ps(ah + 16), _mm512_mul_ps(scale, s1)));
      }
    }
    for (int q = 0; q < tile_blocks * 4; ++q) {
      const int r = t0 + 16 * q;
      const int valid = std::clamp(t1 - r, 0, 16);
      if (valid == 0) break;
      const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
      const __m512 scales = avx512_common::fp16x16_to_f32(reinterpret_cast<const unsigned char*>(m.scales) + 2 * std::int64_t(r), valid);
      _mm512_mask_storeu_ps(y + r, mask, _mm512_mul_ps(_mm512_load_ps(acc + 16 * q), scales));
    }
  }
}

}  // namespace

void rvq_apply_q16(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin, int row_end) {
  assert(row_begin % kRowBlock == 0);
  if (entries == 256) {
    switch (m.stages) {
      case 1: apply_q16_stages<1>(m, lut, y, row_begin, row_end); return;
      case 2: apply_q16_stages<2>(m, lut, y, row_begin, row_end); return;
      case 3: apply_q16_stages<3>(m, lut, y, row_begin, row_end); return;
      case 4: apply_q16_stages<4>(m, lut, y, row_begin, row_end); return;
      default: break;
    }
  }
  generic_impl::rvq_apply_q16(m, lut, entries, y, row_begin, row_end);
}

}  // namespace avx512vbmi_impl

namespace avx512vbmi_impl {

// On AMD (Zen 4) the stage-pair apply is ~1.9x the planes' rate (gate and down shapes in L2, one
// thread); on the Intel VBMI Xeon where the planes were chosen, a pair apply measured no faster
// than vpermt2w and the planes 1.22x it (docs/LEARNED.md, session 8 and session 19). Both give
// generic's bits, so the choice changes speed only.
bool vq4p_by_pairs() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_is("amd");
}

}  // namespace avx512vbmi_impl

const KernelTable& avx512vbmi_table() {
  static const KernelTable table = [] {
    KernelTable t = avx512_table();
    t.isa = "avx512vbmi";
    if (avx512vbmi_impl::vq4p_by_pairs()) {
      t.rvq_apply_vq4p = avx512vbmi_impl::rvq_apply_vq4p_pairs;
      t.rvq_apply_vq4p_tokens = avx512vbmi_impl::rvq_apply_vq4p_pairs_tokens;
    } else {
      t.rvq_apply_vq4p = avx512vbmi_impl::rvq_apply_vq4p;
    }
    t.rvq_apply_q16 = avx512vbmi_impl::rvq_apply_q16;
    return t;
  }();
  return table;
}

}  // namespace waste::kernels::detail

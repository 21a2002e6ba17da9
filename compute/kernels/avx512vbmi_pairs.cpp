// The VQ4P apply by stage pairs (AVX-512 VBMI + VNNI), the avx512vbmi table's choice where it is
// the faster of its two (avx512vbmi.cpp: on AMD Zen 4; docs/design/dispatch.md). Bit-identical to
// generic: integer sums are exact in any order, and acc += block_scale * sum per row, mul then add.
//
// Per 64-row block (two blocks side by side, one index stream each) and vector position, the
// block's 64 runs of 3 bytes are read as four groups of 16 rows (48 bytes). A vpermb spreads a
// group's bytes to one dword per row (run bytes 0, 1, 2 in bytes 0-2), a vpmultishiftqb takes the
// four 6-bit fields at bit offsets 0, 6, 12, 18 of that dword into its four bytes, and a vpternlogd
// clears bits 6-7 and sets bit 6 on stages 1 and 3. Byte 4k+s is then row k's stage-s index, bit 6
// choosing the second table of a pair: two merge-masked vpermi2b look stages 0/1 up in (table 0,
// table 1) and stages 2/3 in (table 2, table 3), and a vpdpbusd against ones adds each row's four
// looked-up bytes into its int32 lane. Rows stay in natural order, one register per 16 rows; the
// int32 sums of a 32-position LUT block (generic's int16 sums: at most 4 * 32 * 127) are converted
// once per block. The index is walked as one stream per block, prefetched into L1 and, further
// ahead, into L2; the LUT (288 x 256 bytes at most for Kimi-Linear) is re-read from L1/L2 per block pair.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cstdint>

#include "compute/kernels/avx512_common.hpp"
#include "compute/kernels/kernel_impl.hpp"

namespace waste::kernels::detail::avx512vbmi_impl {
namespace {

constexpr int kRun = 3;             // bytes per row and vector position (four 6-bit indices)
constexpr int kPerVector = 4 * 64;  // int8 LUT entries per vector position
constexpr int kPositionBytes = kRowBlock * kRun;  // one block's runs at one vector position
// Positions ahead that the apply prefetches in each block's index stream (which is sequential: a
// block's positions, then the next block's): into L1 8 ahead, into L2 32 ahead (1.5 and 6 KB). The
// far L2 requests keep more lines in flight than L1's miss buffers allow: a record in DRAM, one
// thread, ~50 us per gate or down apply against ~60-65 with the L1 prefetch alone.
constexpr int kPrefetchL1Positions = 8;
constexpr int kPrefetchL2Positions = 32;

// The constants of one 16-row group's index expansion.
struct Expand {
  std::array<std::int8_t, 64> spread{};  // byte 4k+s <- run byte 3k+min(s, 2)
  std::array<std::uint8_t, 64> shift{};  // vpmultishiftqb: bit offset of byte 4k+s in its qword
  std::array<std::uint8_t, 64> high{};   // 0x40 on stages 1 and 3 (the pair's second table)
  constexpr Expand() {
    for (int k = 0; k < 16; ++k) {
      for (int s = 0; s < 4; ++s) {
        spread[4 * k + s] = static_cast<std::int8_t>(3 * k + std::min(s, 2));
        shift[4 * k + s] = static_cast<std::uint8_t>(32 * (k % 2) + 6 * s);
        high[4 * k + s] = (s & 1) != 0 ? 0x40 : 0;
      }
    }
  }
};

constexpr __mmask64 kGroupBytes = 0x0000FFFFFFFFFFFFull;  // 16 rows x 3 bytes
constexpr __mmask64 kStages01 = 0x3333333333333333ull;
constexpr __mmask64 kStages23 = 0xCCCCCCCCCCCCCCCCull;

struct PairLookup {
  __m512i spread, shift, high, low6, ones;
  PairLookup() {
    static constexpr Expand kExpand{};
    spread = _mm512_loadu_si512(kExpand.spread.data());
    shift = _mm512_loadu_si512(kExpand.shift.data());
    high = _mm512_loadu_si512(kExpand.high.data());
    low6 = _mm512_set1_epi8(0x3F);
    ones = _mm512_set1_epi8(1);
  }
  // The 16 rows whose runs start at `runs` (a masked load: never past the group's 48 bytes) as
  // lookup bytes: byte 4k+s = row k's stage-s index, +64 on stages 1 and 3.
  __m512i expand(const std::uint8_t* runs) const {
    const __m512i raw = _mm512_maskz_loadu_epi8(kGroupBytes, runs);
    const __m512i fields = _mm512_multishift_epi64_epi8(shift, _mm512_permutexvar_epi8(spread, raw));
    return _mm512_ternarylogic_epi32(fields, low6, high, 0xEA);  // (a & b) | c
  }
  // sum += each row's four looked-up stage values.
  __m512i add_lookup(__m512i sum, __m512i idx, __m512i t0, __m512i t1, __m512i t2, __m512i t3) const {
    const __m512i first = _mm512_mask2_permutex2var_epi8(t0, idx, kStages01, t1);
    const __m512i looked = _mm512_mask2_permutex2var_epi8(t2, first, kStages23, t3);
    return _mm512_dpbusd_epi32(sum, ones, looked);
  }
  __m512i add_group(__m512i sum, const std::uint8_t* runs, __m512i t0, __m512i t1, __m512i t2, __m512i t3) const {
    return add_lookup(sum, expand(runs), t0, t1, t2, t3);
  }
};

// y[r] = acc * fp16(scale_r) for the `groups` x 16 rows from r0 (rows past row_end not stored).
void store_rows(const RvqMatrix& m, const __m512* acc, int groups, float* y, int r0, int row_end) {
  for (int i = 0; i < groups; ++i) {
    const int r = r0 + 16 * i;
    const int valid = std::clamp(row_end - r, 0, 16);
    if (valid == 0) break;
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
    const __m512 scales =
        avx512_common::fp16x16_to_f32(reinterpret_cast<const unsigned char*>(m.scales) + 2 * std::int64_t(r), valid);
    _mm512_mask_storeu_ps(y + r, mask, _mm512_mul_ps(acc[i], scales));
  }
}

// NB consecutive blocks starting at row r0 (rows past row_end are padding and are not stored).
template <int NB>
void apply_blocks(const PairLookup& k, const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales,
                  float* y, int r0, int row_end) {
  const std::int64_t block_bytes = static_cast<std::int64_t>(m.n_vectors) * kPositionBytes;
  const std::uint8_t* runs = m.index + static_cast<std::int64_t>(r0 / kRowBlock) * block_bytes;
  __m512 acc[4 * NB];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const std::int8_t* t = lut_q;
  for (int b = 0, v = 0; v < m.n_vectors; ++b) {
    const int v_end = std::min(m.n_vectors, v + kLutQuantBlock);
    __m512i sum[4 * NB];
    for (auto& s : sum) s = _mm512_setzero_si512();
    for (; v < v_end; ++v, runs += kPositionBytes, t += kPerVector) {
      for (int blk = 0; blk < NB; ++blk) {
        const std::uint8_t* near = runs + blk * block_bytes + kPrefetchL1Positions * kPositionBytes;
        const std::uint8_t* far = runs + blk * block_bytes + kPrefetchL2Positions * kPositionBytes;
        for (int off = 0; off < kPositionBytes; off += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(near + off), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(far + off), _MM_HINT_T1);
        }
      }
      const __m512i t0 = _mm512_loadu_si512(t), t1 = _mm512_loadu_si512(t + 64);
      const __m512i t2 = _mm512_loadu_si512(t + 128), t3 = _mm512_loadu_si512(t + 192);
      for (int blk = 0; blk < NB; ++blk) {
        for (int g = 0; g < 4; ++g) {
          sum[4 * blk + g] = k.add_group(sum[4 * blk + g], runs + blk * block_bytes + 48 * g, t0, t1, t2, t3);
        }
      }
    }
    const __m512 scale = _mm512_set1_ps(block_scales[b]);
    for (int i = 0; i < 4 * NB; ++i) acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(scale, _mm512_cvtepi32_ps(sum[i])));
  }
  store_rows(m, acc, 4 * NB, y, r0, row_end);
}

// Up to 4 tokens against one 64-row block: the block's indices are read and expanded once per
// position and looked up in each token's tables (4 tokens x 4 groups of int32 sums in registers);
// each token's sums and accumulation are those of apply_blocks, so its bits are too.
template <int T>
void apply_block_tokens(const PairLookup& k, const RvqMatrix& m, const std::int8_t* const* lut_q,
                        const float* const* block_scales, float* const* y, int r0, int row_end) {
  const std::int64_t block_bytes = static_cast<std::int64_t>(m.n_vectors) * kPositionBytes;
  const std::uint8_t* runs = m.index + static_cast<std::int64_t>(r0 / kRowBlock) * block_bytes;
  __m512 acc[T][4];
  for (auto& row : acc) {
    for (auto& a : row) a = _mm512_setzero_ps();
  }
  for (int b = 0, v = 0; v < m.n_vectors; ++b) {
    const int v_end = std::min(m.n_vectors, v + kLutQuantBlock);
    __m512i sum[T][4];
    for (auto& row : sum) {
      for (auto& s : row) s = _mm512_setzero_si512();
    }
    for (; v < v_end; ++v, runs += kPositionBytes) {
      for (int off = 0; off < kPositionBytes; off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(runs + kPrefetchL1Positions * kPositionBytes + off), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(runs + kPrefetchL2Positions * kPositionBytes + off), _MM_HINT_T1);
      }
      __m512i idx[4];
      for (int g = 0; g < 4; ++g) idx[g] = k.expand(runs + 48 * g);
      for (int t = 0; t < T; ++t) {
        const std::int8_t* tab = lut_q[t] + static_cast<std::int64_t>(v) * kPerVector;
        const __m512i t0 = _mm512_loadu_si512(tab), t1 = _mm512_loadu_si512(tab + 64);
        const __m512i t2 = _mm512_loadu_si512(tab + 128), t3 = _mm512_loadu_si512(tab + 192);
        for (int g = 0; g < 4; ++g) sum[t][g] = k.add_lookup(sum[t][g], idx[g], t0, t1, t2, t3);
      }
    }
    for (int t = 0; t < T; ++t) {
      const __m512 scale = _mm512_set1_ps(block_scales[t][b]);
      for (int g = 0; g < 4; ++g) acc[t][g] = _mm512_add_ps(acc[t][g], _mm512_mul_ps(scale, _mm512_cvtepi32_ps(sum[t][g])));
    }
  }
  for (int t = 0; t < T; ++t) store_rows(m, acc[t], 4, y[t], r0, row_end);
}

}  // namespace

void rvq_apply_vq4p_pairs_tokens(const RvqMatrix& m, int n, const std::int8_t* const* lut_q,
                                 const float* const* block_scales, float* const* y, int row_begin, int row_end) {
  assert(row_begin % kRowBlock == 0);
  const PairLookup k;
  for (int r0 = row_begin; r0 < row_end; r0 += kRowBlock) {
    int t = 0;
    for (; t + 4 <= n; t += 4) apply_block_tokens<4>(k, m, lut_q + t, block_scales + t, y + t, r0, row_end);
    switch (n - t) {
      case 3: apply_block_tokens<3>(k, m, lut_q + t, block_scales + t, y + t, r0, row_end); break;
      case 2: apply_block_tokens<2>(k, m, lut_q + t, block_scales + t, y + t, r0, row_end); break;
      case 1: apply_block_tokens<1>(k, m, lut_q + t, block_scales + t, y + t, r0, row_end); break;
      default: break;
    }
  }
}

void rvq_apply_vq4p_pairs(const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales, float* y,
                          int row_begin, int row_end) {
  assert(row_begin % kRowBlock == 0);
  const PairLookup k;
  int r0 = row_begin;
  for (; r0 + kRowBlock < row_end; r0 += 2 * kRowBlock) apply_blocks<2>(k, m, lut_q, block_scales, y, r0, row_end);
  if (r0 < row_end) apply_blocks<1>(k, m, lut_q, block_scales, y, r0, row_end);
}

}  // namespace waste::kernels::detail::avx512vbmi_impl

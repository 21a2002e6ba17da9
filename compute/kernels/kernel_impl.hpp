// Private to compute/kernels: the per-ISA tables and the small helpers every ISA file shares.
// Nothing here is part of the public kernel interface (kernels.hpp).
#pragma once

#include <cstdint>
#include <cstring>

#include "compute/kernels/kernels.hpp"

namespace waste::kernels::detail {

// TensorFormat ids as stored in QuantMatrix::fmt (waste-v0-reference.md §1.4).
inline constexpr std::uint8_t kFmtF32 = 0;
inline constexpr std::uint8_t kFmtQ8G = 2;
inline constexpr std::uint8_t kFmtQ4G = 3;
inline constexpr std::uint8_t kFmtQ3G = 7;

inline constexpr int kRowBlock = 64;  // RVQ index blocking (rows per block)

// RVQ apply tiling (AVX2, AVX-512): the rows of up to kRvqTileBlocks index blocks share one pass
// over the LUT, so each vector position's LUT slice is pulled into L1 once per tile rather than
// once per block (gate shape, AVX-512: 1 block per pass 367 us, 8 blocks 215 us).
inline constexpr int kRvqTileBlocks = 8;

// Index runs come from expert records in DRAM (4.8 GB for Kimi-Linear), read as up to 8
// interleaved streams of 64*S bytes per vector position (one per block of the tile), which the
// hardware prefetchers follow poorly. The apply kernels prefetch each stream this many positions
// ahead into L1 (AVX-512, DRAM-resident gate half: 113-119 -> 108-110 us; down half 110-191 ->
// 106-121 us; a non-temporal prefetch was ~2x slower).
inline constexpr int kRvqPrefetchAhead = 8;

// Prefetch the index runs (64*S bytes) of one vector position in `blocks` blocks starting at
// `first`, `block_bytes` apart. Consecutive positions are contiguous, so three lines per
// position cover every line over the walk.
template <int S>
inline void rvq_prefetch_runs(const std::uint8_t* first, std::int64_t block_bytes, int blocks) noexcept {
  for (int b = 0; b < blocks; ++b) {
    const std::uint8_t* p = first + b * block_bytes;
    for (int off = 0; off < kRowBlock * S; off += 64) __builtin_prefetch(p + off, 0, 3);
  }
}

// Rows per tile for [row_begin, row_end): whole blocks, at most kRvqTileBlocks, spread evenly so
// 18 blocks become 6+6+6 rather than 8+8+2 (a small tile re-reads the whole LUT).
inline int rvq_tile_rows(int row_begin, int row_end) noexcept {
  const int blocks = (row_end - row_begin + kRowBlock - 1) / kRowBlock;
  const int tiles = (blocks + kRvqTileBlocks - 1) / kRvqTileBlocks;
  return (blocks + tiles - 1) / tiles * kRowBlock;
}

// The `stages` indices of row r at vector position v (8-bit runs, or VQ4P's 3-byte runs of four
// 6-bit indices), the layout of waste-v0-reference.md §2.
inline const std::uint8_t* rvq_run(const RvqMatrix& m, int r, int v) noexcept {
  const int run = m.packed6 ? 3 : m.stages;
  return m.index + (static_cast<std::int64_t>(r / kRowBlock) * m.n_vectors + v) * kRowBlock * run +
         (r % kRowBlock) * run;
}
inline void rvq_unpack6(const std::uint8_t* run, unsigned* idx) noexcept {
  idx[0] = run[0] & 63u;
  idx[1] = ((run[0] >> 6) | (run[1] << 2)) & 63u;
  idx[2] = ((run[1] >> 4) | (run[2] << 4)) & 63u;
  idx[3] = run[2] >> 2;
}

// Row scales in a record sit right after the index data and may be unaligned.
inline std::uint16_t load_u16(const std::uint16_t* base, std::int64_t i) noexcept {
  std::uint16_t value;
  std::memcpy(&value, reinterpret_cast<const unsigned char*>(base) + 2 * i, sizeof value);
  return value;
}

// Q3G element i of a row (bits [3i, 3i+3) LSB first; the guard byte makes the +1 read safe).
inline int q3_value(const std::uint8_t* row, std::int64_t i) noexcept {
  const std::int64_t bit = 3 * i;
  const unsigned lo = row[bit >> 3];
  const unsigned hi = row[(bit >> 3) + 1];
  const unsigned v = (lo >> (bit & 7)) | (hi << (8 - (bit & 7)));
  return static_cast<int>(v & 7u) - 4;
}

// Table constructors, one per translation unit; a table exists only where its file was built.
const KernelTable& generic_table();
#if defined(__x86_64__) || defined(_M_X64)
const KernelTable& avx2_table();
const KernelTable& avx512_table();
const KernelTable& avx512vbmi_table();  // avx512_table + a VBMI VQ4P apply (avx512vbmi.cpp)
#endif
#if defined(__aarch64__)
const KernelTable& neon_table();
#endif

// Generic entries, reused by ISA tables for entries where a vector version gains nothing.
namespace generic_impl {
void matvec(const QuantMatrix& w, const float* x, float* y, std::int64_t row_begin,
            std::int64_t row_end);
void matmul(const QuantMatrix& w, const float* x, std::int64_t x_stride, int n, float* y,
            std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end);
void rvq_lut_build(const float* x, const float* const* books, int stages, int entries, int vec_dim,
                   int v_begin, int v_end, float* lut);
void rvq_lut_quantize(const float* lut, int n_vectors, int stages, int entries, std::int8_t* lut_q,
                      float* block_scales);
void rvq_apply(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin,
               int row_end);
void rvq_apply_vq4p(const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales,
                    float* y, int row_begin, int row_end);
void rvq_lut_to_q16(float* lut, int stages, int entries, int v_begin, int v_end);
void rvq_apply_q16(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin,
                   int row_end);
void rvq_matmul(const RvqMatrix& m, const float* const* books, int vec_dim, const float* x,
                std::int64_t x_stride, int n, float* y, std::int64_t y_stride, int row_begin,
                int row_end);
void kda_head_step(float* S, const float* q, const float* k, const float* v, const float* g,
                   float beta, int D, float* o);
}  // namespace generic_impl

#if defined(__x86_64__) || defined(_M_X64)
// The 512-bit trunk matvec / matmul (avx512_matvec.cpp).
namespace avx512_impl {
void matvec(const QuantMatrix& w, const float* x, float* y, std::int64_t row_begin,
            std::int64_t row_end);
void matmul(const QuantMatrix& w, const float* x, std::int64_t x_stride, int n, float* y,
            std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end);
// MLA's weighted rows (kernels.hpp `weighted_rows`), Q4G and Q8G with groups and columns multiples of 64.
void weighted_rows(const QuantMatrix& w, std::int64_t row0, int n_rows, const float* x, std::int64_t x_stride, int n,
                   float* y, std::int64_t y_stride);
// avx512_kda.cpp: the AVX2 kernel's bits, the output in registers, the state written once.
void kda_head_step(float* S, const float* q, const float* k, const float* v, const float* g, float beta, int D,
                   float* o);
// avx512_rvq_matmul.cpp
void rvq_matmul(const RvqMatrix& m, const float* const* books, int vec_dim, const float* x,
                std::int64_t x_stride, int n, float* y, std::int64_t y_stride, int row_begin,
                int row_end);
// avx512_exp.cpp: sampling's weights (the C library's expf, bit for bit, where
// exp_matches_libm() says the running one is the one repeated) and a logprob's normaliser.
void exp_weights(const float* x, int n, float sub, float div, float* y);
bool exp_matches_libm();
double sum_exp(const float* x, std::int64_t n, double sub);
}  // namespace avx512_impl
// The avx512vbmi table's two VQ4P applies (bit-identical; which one the table takes is
// avx512vbmi.cpp's `vq4p_by_pairs`): byte planes, 64 rows per vpermb (avx512vbmi.cpp), and stage
// pairs by vpermi2b summed by vpdpbusd (avx512vbmi_pairs.cpp, needs avx512vnni).
namespace avx512vbmi_impl {
void rvq_apply_vq4p(const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales,
                    float* y, int row_begin, int row_end);
void rvq_apply_vq4p_pairs(const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales,
                          float* y, int row_begin, int row_end);
void rvq_apply_vq4p_pairs_tokens(const RvqMatrix& m, int n, const std::int8_t* const* lut_q,
                                 const float* const* block_scales, float* const* y, int row_begin,
                                 int row_end);
// Whether this CPU's avx512vbmi table takes the pairs apply.
bool vq4p_by_pairs();
}  // namespace avx512vbmi_impl
#endif

}  // namespace waste::kernels::detail

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
#endif

// Generic entries, reused by ISA tables for entries where a vector version gains nothing.
namespace generic_impl {
void matvec(const QuantMatrix& w, const float* x, float* y, std::int64_t row_begin,
            std::int64_t row_end);
void rvq_lut_build(const float* x, const float* const* books, int stages, int entries, int vec_dim,
                   int v_begin, int v_end, float* lut);
void rvq_lut_quantize(const float* lut, int n_vectors, int stages, int entries, std::int8_t* lut_q,
                      float* block_scales);
void rvq_apply(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin,
               int row_end);
void rvq_apply_vq4p(const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales,
                    float* y, int row_begin, int row_end);
void kda_head_step(float* S, const float* q, const float* k, const float* v, const float* g,
                   float beta, int D, float* o);
}  // namespace generic_impl

}  // namespace waste::kernels::detail

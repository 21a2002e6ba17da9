// AVX2 rvq_decode (also the AVX-512 table's): one vector position of one row is vec_dim floats,
// so a multiple of 8 is whole ymm loads of the stage centroids, added stage after stage as
// generic does (no FMA): bit-identical to generic_impl::rvq_decode. Other vec_dims go to generic.
// Walk: per 64-row index block, vector positions outer and rows inner, so the index runs are read
// contiguously and each row of the output is written left to right.
#include <immintrin.h>

#include <algorithm>

#include "compute/kernels/avx2.hpp"
#include "compute/kernels/kernel_impl.hpp"

namespace waste::kernels::detail::avx2_impl {
namespace {

template <int S, bool Packed6>
void decode_block(const RvqMatrix& m, const float* const* books, int vec_dim, int r0, int r1, float* w,
                  std::int64_t cols, int row_begin) {
  constexpr int kRun = Packed6 ? 3 : S;
  const std::uint8_t* base = m.index + static_cast<std::int64_t>(r0 / kRowBlock) * m.n_vectors * kRowBlock * kRun +
                             (r0 % kRowBlock) * kRun;
  unsigned idx[8];
  for (int v = 0; v < m.n_vectors; ++v) {
    const std::uint8_t* run = base + static_cast<std::int64_t>(v) * kRowBlock * kRun;
    float* out = w + (r0 - row_begin) * cols + static_cast<std::int64_t>(v) * vec_dim;
    for (int r = r0; r < r1; ++r, run += kRun, out += cols) {
      if constexpr (Packed6) {
        rvq_unpack6(run, idx);
      } else {
        for (int s = 0; s < S; ++s) idx[s] = run[s];
      }
      for (int d = 0; d < vec_dim; d += 8) {
        __m256 acc = _mm256_loadu_ps(books[0] + static_cast<std::int64_t>(idx[0]) * vec_dim + d);
        for (int s = 1; s < S; ++s) {
          acc = _mm256_add_ps(acc, _mm256_loadu_ps(books[s] + static_cast<std::int64_t>(idx[s]) * vec_dim + d));
        }
        _mm256_storeu_ps(out + d, acc);
      }
    }
  }
}

template <int S, bool Packed6>
void decode_rows(const RvqMatrix& m, const float* const* books, int vec_dim, int row_begin, int row_end, float* w) {
  const std::int64_t cols = static_cast<std::int64_t>(m.n_vectors) * vec_dim;
  for (int r0 = row_begin; r0 < row_end;) {
    const int r1 = std::min(row_end, (r0 / kRowBlock + 1) * kRowBlock);
    decode_block<S, Packed6>(m, books, vec_dim, r0, r1, w, cols, row_begin);
    r0 = r1;
  }
}

}  // namespace

void rvq_decode(const RvqMatrix& m, const float* const* books, int vec_dim, int row_begin, int row_end,
                float* w) {
  if (vec_dim % 8 != 0) {
    generic_impl::rvq_decode(m, books, vec_dim, row_begin, row_end, w);
    return;
  }
  if (m.packed6) {
    if (m.stages != 4) {
      generic_impl::rvq_decode(m, books, vec_dim, row_begin, row_end, w);
      return;
    }
    decode_rows<4, true>(m, books, vec_dim, row_begin, row_end, w);
    return;
  }
  switch (m.stages) {
    case 1: decode_rows<1, false>(m, books, vec_dim, row_begin, row_end, w); return;
    case 2: decode_rows<2, false>(m, books, vec_dim, row_begin, row_end, w); return;
    case 3: decode_rows<3, false>(m, books, vec_dim, row_begin, row_end, w); return;
    case 4: decode_rows<4, false>(m, books, vec_dim, row_begin, row_end, w); return;
    default: generic_impl::rvq_decode(m, books, vec_dim, row_begin, row_end, w); return;
  }
}

}  // namespace waste::kernels::detail::avx2_impl

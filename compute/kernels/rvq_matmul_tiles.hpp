// The x86 rvq_matmul (KernelTable::rvq_matmul) for R rows x T tokens per tile (R*T ymm
// accumulators), shared by the AVX2 (2 x 4: 16 ymm registers) and AVX-512 (3 x 8: 32) tables; include only from a file
// built with AVX2 + FMA flags. Each row's W is decoded from its index runs into one ymm per 8
// columns (stage centroids added left to right) and multiplied into every token of the tile
// with FMA, so it is decoded once per tile of tokens and never stored. Per (row, token) the
// order is the contract's (kernels.hpp): lane l sums columns l mod 8 ascending by FMA, a fixed
// horizontal sum, then the row scale; it does not depend on R, the token tile or the row range.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <utility>

#include "compute/kernels/kernel_impl.hpp"
#include "shared/fp16.hpp"

namespace waste::kernels::detail::rvq_matmul_tiles {

inline float hsum8(__m256 a) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));  // l0+l4 ..
  const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));  // (l0+l4)+(l2+l6), (l1+l5)+(l3+l7)
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// VD: vec_dim when it is known at compile time (8, every converter default), 0 = vec_dim.
template <int S, bool Packed6, int R, int T, int VD>
void tile(const float* const* books, int vec_dim_arg, const std::uint8_t* const* runs, int n_vectors,
          const float* x, std::int64_t x_stride, float* y, std::int64_t y_stride, int r) {
  constexpr int kRun = Packed6 ? 3 : S;
  constexpr std::int64_t run_stride = static_cast<std::int64_t>(kRowBlock) * kRun;
  const int vec_dim = VD != 0 ? VD : vec_dim_arg;
  __m256 acc[R][T];
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  const float* b[S];
  for (int s = 0; s < S; ++s) b[s] = books[s];
  for (int v = 0; v < n_vectors; ++v) {
    unsigned idx[R][4];
    for (int i = 0; i < R; ++i) {
      const std::uint8_t* run = runs[i] + v * run_stride;
      if constexpr (Packed6) {
        rvq_unpack6(run, idx[i]);
      } else {
        for (int s = 0; s < kRun; ++s) idx[i][s] = run[s];
      }
    }
    const std::int64_t c0 = static_cast<std::int64_t>(v) * vec_dim;
    for (int d = 0; d < vec_dim; d += 8) {
      __m256 w[R];
      for (int i = 0; i < R; ++i) {
        w[i] = _mm256_loadu_ps(b[0] + static_cast<std::int64_t>(idx[i][0]) * vec_dim + d);
        for (int s = 1; s < S; ++s) {
          w[i] = _mm256_add_ps(w[i], _mm256_loadu_ps(b[s] + static_cast<std::int64_t>(idx[i][s]) * vec_dim + d));
        }
      }
      for (int j = 0; j < T; ++j) {
        const __m256 xv = _mm256_loadu_ps(x + j * x_stride + c0 + d);
        for (int i = 0; i < R; ++i) acc[i][j] = _mm256_fmadd_ps(w[i], xv, acc[i][j]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < T; ++j) y[j * y_stride + r + i] = hsum8(acc[i][j]);
  }
}

template <int S, bool Packed6, int R, int T, int VD>
void token_tiles(const RvqMatrix& m, const float* const* books, int vec_dim, const float* x, std::int64_t x_stride,
                 int n, float* y, std::int64_t y_stride, int r, const std::uint8_t* const* runs) {
  int t = 0;
  for (; t + T <= n; t += T) {
    tile<S, Packed6, R, T, VD>(books, vec_dim, runs, m.n_vectors, x + t * x_stride, x_stride, y + t * y_stride,
                               y_stride, r);
  }
  if (t == n) return;
  if constexpr (T > 1) {
    // The remaining n - t < T tokens: one tile of exactly that many.
    [&]<int... K>(std::integer_sequence<int, K...>) {
      ((n - t == K + 1 ? tile<S, Packed6, R, K + 1, VD>(books, vec_dim, runs, m.n_vectors, x + t * x_stride,
                                                         x_stride, y + t * y_stride, y_stride, r)
                       : void()),
       ...);
    }(std::make_integer_sequence<int, T - 1>{});
  }
}

template <int S, bool Packed6, int R, int T, int VD>
void row_tile(const RvqMatrix& m, const float* const* books, int vec_dim, const float* x, std::int64_t x_stride,
              int n, float* y, std::int64_t y_stride, int r) {
  const std::uint8_t* runs[R];
  for (int i = 0; i < R; ++i) runs[i] = rvq_run(m, r + i, 0);
  token_tiles<S, Packed6, R, T, VD>(m, books, vec_dim, x, x_stride, n, y, y_stride, r, runs);
  for (int i = 0; i < R; ++i) {
    const float scale = fp16_to_f32(load_u16(m.scales, r + i));
    for (int t = 0; t < n; ++t) y[t * y_stride + r + i] *= scale;
  }
}

template <int S, bool Packed6, int R, int T, int VD>
void rows(const RvqMatrix& m, const float* const* books, int vec_dim, const float* x, std::int64_t x_stride, int n,
          float* y, std::int64_t y_stride, int row_begin, int row_end) {
  int r = row_begin;
  for (; r + R <= row_end; r += R) row_tile<S, Packed6, R, T, VD>(m, books, vec_dim, x, x_stride, n, y, y_stride, r);
  for (; r < row_end; ++r) row_tile<S, Packed6, 1, T, VD>(m, books, vec_dim, x, x_stride, n, y, y_stride, r);
}

template <int R, int T, int VD, class Fallback>
void by_stages(const RvqMatrix& m, const float* const* books, int vec_dim, const float* x, std::int64_t x_stride,
               int n, float* y, std::int64_t y_stride, int row_begin, int row_end, Fallback fallback) {
  if (m.packed6) {
    rows<4, true, R, T, VD>(m, books, vec_dim, x, x_stride, n, y, y_stride, row_begin, row_end);
    return;
  }
  switch (m.stages) {
    case 1: rows<1, false, R, T, VD>(m, books, vec_dim, x, x_stride, n, y, y_stride, row_begin, row_end); return;
    case 2: rows<2, false, R, T, VD>(m, books, vec_dim, x, x_stride, n, y, y_stride, row_begin, row_end); return;
    case 3: rows<3, false, R, T, VD>(m, books, vec_dim, x, x_stride, n, y, y_stride, row_begin, row_end); return;
    case 4: rows<4, false, R, T, VD>(m, books, vec_dim, x, x_stride, n, y, y_stride, row_begin, row_end); return;
    default: fallback(m, books, vec_dim, x, x_stride, n, y, y_stride, row_begin, row_end); return;
  }
}

// The table entry: vec_dim a multiple of 8 and 1-4 stages (VQ4P: 4), else `fallback` (generic).
template <int R, int T, class Fallback>
void rvq_matmul(const RvqMatrix& m, const float* const* books, int vec_dim, const float* x, std::int64_t x_stride,
                int n, float* y, std::int64_t y_stride, int row_begin, int row_end, Fallback fallback) {
  if (vec_dim % 8 != 0 || (m.packed6 && m.stages != 4)) {
    fallback(m, books, vec_dim, x, x_stride, n, y, y_stride, row_begin, row_end);
    return;
  }
  if (vec_dim == 8) {
    by_stages<R, T, 8>(m, books, vec_dim, x, x_stride, n, y, y_stride, row_begin, row_end, fallback);
  } else {
    by_stages<R, T, 0>(m, books, vec_dim, x, x_stride, n, y, y_stride, row_begin, row_end, fallback);
  }
}

}  // namespace waste::kernels::detail::rvq_matmul_tiles

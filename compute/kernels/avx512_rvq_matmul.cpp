// The avx512 table's rvq_matmul: rvq_matmul_tiles.hpp with 3-row x 8-token tiles.
#include "compute/kernels/rvq_matmul_tiles.hpp"


namespace waste::kernels::detail::avx512_impl {

void rvq_matmul(const RvqMatrix& m, const float* const* books, int vec_dim, const float* x, std::int64_t x_stride,
                int n, float* y, std::int64_t y_stride, int row_begin, int row_end) {
  rvq_matmul_tiles::rvq_matmul<3, 8>(m, books, vec_dim, x, x_stride, n, y, y_stride, row_begin, row_end,
                                 generic_impl::rvq_matmul);
}

}  // namespace waste::kernels::detail::avx512_impl

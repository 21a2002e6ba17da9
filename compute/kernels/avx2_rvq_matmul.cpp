// The avx2 table's rvq_matmul: rvq_matmul_tiles.hpp with 2-row x 4-token tiles.
#include "compute/kernels/rvq_matmul_tiles.hpp"
#include "compute/kernels/avx2.hpp"

namespace waste::kernels::detail::avx2_impl {

void rvq_matmul(const RvqMatrix& m, const float* const* books, int vec_dim, const float* x, std::int64_t x_stride,
                int n, float* y, std::int64_t y_stride, int row_begin, int row_end) {
  rvq_matmul_tiles::rvq_matmul<2, 4>(m, books, vec_dim, x, x_stride, n, y, y_stride, row_begin, row_end,
                                 generic_impl::rvq_matmul);
}

}  // namespace waste::kernels::detail::avx2_impl

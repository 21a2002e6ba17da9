#include "compute/forward/fused_matvec.hpp"

#include <algorithm>

#include "compute/forward/int8_mode.hpp"

namespace waste::forward {

void matvec_tokens_fused(const Exec& exec, std::span<const Projection> projections, const float* x,
                         std::int64_t x_stride, int n) {
  // Under the int8 rule each projection decides as matvec_tokens would alone; the fused dispatch
  // below takes them together when they decide alike (all f32, or every row int8).
  const Int8Rows rows = int8_rows(exec, n);
  std::size_t takers = 0;
  bool same_cols = true;
  for (const Projection& p : projections) {
    takers += takes_int8_rules(*p.w) ? 1 : 0;
    same_cols = same_cols && p.w->cols == projections[0].w->cols;
  }
  const bool int8 = rows == Int8Rows::all && takers == projections.size() && same_cols;
  if (rows != Int8Rows::none && takers > 0 && !int8) {
    for (const Projection& p : projections) matvec_tokens(exec, *p.w, x, x_stride, n, p.y, p.y_stride);
    return;
  }
  // One quantised input for every projection when they all take the int8 product.
  const kernels::Int8Acts* acts = int8 ? &quantized_input(x, x_stride, n, projections[0].w->cols) : nullptr;
  const kernels::MatmulI8Fn i8 = kernels::matmul_i8();
  const auto* k = &exec.kernels;
  std::int64_t total = 0;
  for (const Projection& p : projections) total += p.w->rows;
  exec.pool.parallel_for(total, kMatvecMinRows, [&](std::int64_t begin, std::int64_t end) {
    std::int64_t base = 0;
    for (const Projection& p : projections) {
      const std::int64_t b = std::max(begin, base) - base;
      const std::int64_t e = std::min(end, base + p.w->rows) - base;
      if (b < e) {
        if (acts != nullptr) {
          i8(*p.w, *acts, p.y, p.y_stride, b, e);
        } else {
          k->matmul(*p.w, x, x_stride, n, p.y, p.y_stride, b, e);
        }
      }
      base += p.w->rows;
    }
  });
}

}  // namespace waste::forward

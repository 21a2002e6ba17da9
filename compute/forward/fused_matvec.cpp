#include "compute/forward/fused_matvec.hpp"

#include <algorithm>

#include "compute/forward/int8_mode.hpp"

namespace waste::forward {

void matvec_tokens_fused(const Exec& exec, std::span<const Projection> projections, const float* x,
                         std::int64_t x_stride, int n) {
  const auto* k = &exec.kernels;
  std::int64_t total = 0;
  bool int8 = n >= kInt8MinTokens && int8_prefill_enabled();
  for (const Projection& p : projections) {
    total += p.w->rows;
    int8 = int8 && kernels::int8_matmul_supports(*p.w) && p.w->cols == projections[0].w->cols;
  }
  // One quantised input for every projection when they all take the int8 product.
  const kernels::Int8Acts* acts = int8 ? &quantized_input(x, x_stride, n, projections[0].w->cols) : nullptr;
  const kernels::MatmulI8Fn i8 = kernels::matmul_i8();
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

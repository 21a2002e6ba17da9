#include "compute/forward/fused_matvec.hpp"

#include <algorithm>

namespace waste::forward {

void matvec_tokens_fused(const Exec& exec, std::span<const Projection> projections, const float* x,
                         std::int64_t x_stride, int n) {
  const auto* k = &exec.kernels;
  std::int64_t total = 0;
  for (const Projection& p : projections) total += p.w->rows;
  exec.pool.parallel_for(total, kMatvecMinRows, [&](std::int64_t begin, std::int64_t end) {
    std::int64_t base = 0;
    for (const Projection& p : projections) {
      const std::int64_t b = std::max(begin, base) - base;
      const std::int64_t e = std::min(end, base + p.w->rows) - base;
      if (b < e) k->matmul(*p.w, x, x_stride, n, p.y, p.y_stride, b, e);
      base += p.w->rows;
    }
  });
}

}  // namespace waste::forward

#include "compute/forward/fused_matvec.hpp"

#include <algorithm>

#include "compute/forward/int8_mode.hpp"
#include "compute/kernels/int8_matmul.hpp"

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
  if (int8) {  // one quantised input for every projection
    // The caller's buffer, named by reference: a thread_local used inside the lambda would be each
    // worker's own (empty) one.
    thread_local kernels::Int8Acts buffer;
    kernels::Int8Acts& acts = buffer;
    kernels::quantize_acts(x, x_stride, n, projections[0].w->cols, acts);
    const kernels::MatmulI8Fn fn = kernels::matmul_i8();
    exec.pool.parallel_for(total, kMatvecMinRows, [&](std::int64_t begin, std::int64_t end) {
      std::int64_t base = 0;
      for (const Projection& p : projections) {
        const std::int64_t b = std::max(begin, base) - base;
        const std::int64_t e = std::min(end, base + p.w->rows) - base;
        if (b < e) fn(*p.w, acts, p.y, p.y_stride, b, e);
        base += p.w->rows;
      }
    });
    return;
  }
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

// Several trunk matrices that read the same x in one pool job (KDA's input projections).
#pragma once

#include <cstdint>
#include <span>

#include "compute/forward/ops.hpp"

namespace waste::forward {

// One matrix of a fused dispatch: y_t = W x_t into y + t*y_stride.
struct Projection {
  const kernels::QuantMatrix* w;
  float* y;
  std::int64_t y_stride;
};

// matvec_tokens for several matrices that read the same x (KDA's q, k, v, f_a, b_proj): one pool
// job over their rows laid end to end, so the pool is joined once, not once per matrix. Each row
// is the same kernel arithmetic whatever range it falls in, so this equals one matvec_tokens per
// matrix bit for bit. Every matrix must have x's column count.
void matvec_tokens_fused(const Exec& exec, std::span<const Projection> projections, const float* x,
                         std::int64_t x_stride, int n);

}  // namespace waste::forward

// Attention Residuals (attn_res.hpp).
#include "compute/forward/attn_res.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "compute/forward/ops.hpp"

namespace waste::forward {

void attn_res(const float* blocks, int nb, const float* ps, const float* norm_w, const float* proj_w, int n,
              float eps, float* scores, float* out) {
  // score_i = sum_j v_i[j] * rms_inv(v_i) * norm_w[j] * proj_w[j], candidates blocks..., ps
  auto score = [&](const float* v) {
    const float inv = rms_inverse(v, n, eps);
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += v[j] * inv * norm_w[j] * proj_w[j];
    return sum;
  };
  float max_score = -INFINITY;
  for (int i = 0; i <= nb; ++i) {
    scores[i] = score(i < nb ? blocks + std::int64_t(i) * n : ps);
    max_score = std::max(max_score, scores[i]);
  }
  float sum = 0.0f;
  for (int i = 0; i <= nb; ++i) {
    scores[i] = std::exp(scores[i] - max_score);
    sum += scores[i];
  }
  for (int i = 0; i <= nb; ++i) scores[i] /= sum;
  // ps term first: this is what makes out == ps safe.
  for (int j = 0; j < n; ++j) out[j] = scores[nb] * ps[j];
  for (int i = 0; i < nb; ++i) {
    const float* b = blocks + std::int64_t(i) * n;
    for (int j = 0; j < n; ++j) out[j] += scores[i] * b[j];
  }
}

}  // namespace waste::forward

// Attention Residuals (waste-v0-reference.md §3.7, K3): the learned mix over block summaries
// that replaces the plain residual add. residual.cpp calls it between blocks.
#pragma once

namespace waste::forward {

// AttnRes (§3.7): softmax over candidates blocks[0..nb) and ps, scored by the normed value
// against norm_w * proj_w; out = a_nb * ps + sum_i a_i * blocks[i] (out may alias ps).
void attn_res(const float* blocks, int nb, const float* ps, const float* norm_w, const float* proj_w, int n,
              float eps, float* scores, float* out);

}  // namespace waste::forward

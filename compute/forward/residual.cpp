// The residual stream between blocks (residual.hpp).
#include "compute/forward/residual.hpp"

#include <cstring>

#include "compute/forward/attn_res.hpp"
#include "compute/forward/ops.hpp"
#include "compute/forward/scratch.hpp"
#include "shared/memory/client_sizing.hpp"

namespace waste::forward {

Residual::Residual(const ModelConfig& c, ResidualKind kind) : c_(c), kind_(kind) {
  scores_.assign(sizing::forward_sizes(c, 1).res_scores, 0.0f);
}

bool Residual::before_attention(const model::LayerWeights& lw, int layer, float* x, float* ps, float* blocks,
                                int& n_blocks, float* h) {
  const int hid = c_.hidden;
  bool live = true;
  if (kind_ == ResidualKind::attn_res) {
    // ps = x; x = attn_res(blocks, ps); a block boundary files ps away and restarts the sum
    std::memcpy(ps, x, std::size_t(hid) * sizeof(float));
    if (n_blocks > 0) {
      attn_res(blocks, n_blocks, ps, lw.attn_res_norm.data(), lw.attn_res_proj.data(), hid, c_.rms_eps,
               scores_.data(), x);
    }
    if (layer % c_.attn_res_block == 0) {
      std::memcpy(blocks + std::int64_t(n_blocks) * hid, ps, std::size_t(hid) * sizeof(float));
      ++n_blocks;
      live = false;
    }
  }
  // h = input_layernorm(x)
  rms_norm(x, lw.input_norm.data(), hid, c_.rms_eps, h);
  return live;
}

void Residual::after_attention(const model::LayerWeights& lw, bool live, const float* a, float* x, float* ps,
                               const float* blocks, int n_blocks, float* h) {
  const int hid = c_.hidden;
  if (kind_ == ResidualKind::attn_res) {
    // ps = ps + a (or a after a boundary); x = attn_res(blocks, ps)
    for (int i = 0; i < hid; ++i) ps[i] = live ? ps[i] + a[i] : a[i];
    attn_res(blocks, n_blocks, ps, lw.mlp_res_norm.data(), lw.mlp_res_proj.data(), hid, c_.rms_eps, scores_.data(),
             x);
  } else {
    for (int i = 0; i < hid; ++i) x[i] += a[i];  // x = x + a
  }
  // h = post_attention_layernorm(x)
  rms_norm(x, lw.post_norm.data(), hid, c_.rms_eps, h);
}

void Residual::after_mixer(const float* f, float* x, float* ps) {
  const int hid = c_.hidden;
  if (kind_ == ResidualKind::attn_res) {
    for (int i = 0; i < hid; ++i) ps[i] += f[i];  // x = ps = ps + f
    std::memcpy(x, ps, std::size_t(hid) * sizeof(float));
  } else {
    for (int i = 0; i < hid; ++i) x[i] += f[i];  // x = x + f
  }
}

void Residual::before_head(const model::ModelWeights& w, const float* blocks, int n_blocks, float* x) {
  if (kind_ == ResidualKind::attn_res && n_blocks > 0) {
    attn_res(blocks, n_blocks, x, w.out_res_norm.data(), w.out_res_proj.data(), c_.hidden, c_.rms_eps,
             scores_.data(), x);
  }
}

std::uint64_t Residual::bytes() const { return capacity_bytes(scores_); }

}  // namespace waste::forward

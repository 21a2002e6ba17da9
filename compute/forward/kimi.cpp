// One decode step of Kimi-Linear / Kimi K3 (waste-v0-reference.md §3.3), top to bottom.
// PyTorch equivalents in the comments; the per-block math lives in kda.cpp, mla.cpp, moe.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compute/forward/forward.hpp"

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

Forward::Forward(const Inputs& in)
    : c_(in.config),
      w_(in.weights),
      trunk_(in.trunk),
      experts_{in.source, in.codebooks, in.geometry},
      exec_{in.pool, in.kernels} {
  const std::size_t hid = std::size_t(c_.hidden);
  if (c_.n_mla_layers() > 0) mla_.resize(c_, in.ctx_tokens);
  if (c_.n_kda_layers() > 0) kda_.resize(c_);
  moe_.resize(c_, in.geometry);
  x_.assign(hid, 0.0f);
  ps_.assign(hid, 0.0f);
  h_.assign(hid, 0.0f);
  a_.assign(hid, 0.0f);
  f_.assign(hid, 0.0f);
  ffn_a_.assign(std::size_t(std::max(c_.dense_inter, 1)), 0.0f);
  ffn_b_.assign(std::size_t(std::max(c_.dense_inter, 1)), 0.0f);
  res_scores_.assign(std::size_t(c_.attn_res_block > 0 ? c_.n_layers / c_.attn_res_block + 3 : 1), 0.0f);
}

Status Forward::step(int token, model::RunState& state, std::span<float> logits) {
  const int hid = c_.hidden;
  const float eps = c_.rms_eps;
  const int pos = state.position();
  const bool attn_res_on = c_.attn_res_block > 0;
  float* x = x_.data();
  float* ps = ps_.data();
  float* h = h_.data();
  float* blocks = state.blocks().data();
  int n_blocks = 0;

  // x = embed_tokens[token]
  WASTE_TRY(trunk_.read_row(*w_.embed, token, x_));

  for (int L = 0; L < c_.n_layers; ++L) {
    const model::LayerWeights& lw = w_.layers[std::size_t(L)];
    bool live = true;

    if (attn_res_on) {
      // ps = x; x = attn_res(blocks, ps); a block boundary files ps away and restarts the sum
      std::memcpy(ps, x, std::size_t(hid) * sizeof(float));
      if (n_blocks > 0) {
        attn_res(blocks, n_blocks, ps, lw.attn_res_norm.data(), lw.attn_res_proj.data(), hid, eps,
                 res_scores_.data(), x);
      }
      if (L % c_.attn_res_block == 0) {
        std::memcpy(blocks + std::int64_t(n_blocks) * hid, ps, std::size_t(hid) * sizeof(float));
        ++n_blocks;
        live = false;
      }
    }

    // a = self_attn(input_layernorm(x))
    rms_norm(x, lw.input_norm.data(), hid, eps, h);
    if (lw.kda) {
      kda_forward(exec_, c_, lw.kda_w, h, state, L, kda_, a_.data());
    } else {
      mla_forward(exec_, c_, lw.mla_w, h, pos, state.latent_cache(L).data(), mla_, a_.data());
    }

    if (attn_res_on) {
      // ps = ps + a (or a after a boundary); x = attn_res(blocks, ps)
      for (int i = 0; i < hid; ++i) ps[i] = live ? ps[i] + a_[i] : a_[i];
      attn_res(blocks, n_blocks, ps, lw.mlp_res_norm.data(), lw.mlp_res_proj.data(), hid, eps, res_scores_.data(),
               x);
    } else {
      for (int i = 0; i < hid; ++i) x[i] += a_[i];  // x = x + a
    }

    // f = mlp(post_attention_layernorm(x))
    rms_norm(x, lw.post_norm.data(), hid, eps, h);
    if (lw.moe) {
      WASTE_TRY(moe_forward(exec_, c_, lw.moe_w, L, h, experts_, moe_, f_.data()));
    } else {
      ffn_forward(exec_, c_, lw.dense, h, ffn_a_.data(), ffn_b_.data(), f_.data());
    }

    if (attn_res_on) {
      for (int i = 0; i < hid; ++i) ps[i] += f_[i];  // x = ps = ps + f
      std::memcpy(x, ps, std::size_t(hid) * sizeof(float));
    } else {
      for (int i = 0; i < hid; ++i) x[i] += f_[i];  // x = x + f
    }
  }

  if (attn_res_on && n_blocks > 0) {
    attn_res(blocks, n_blocks, x, w_.out_res_norm.data(), w_.out_res_proj.data(), hid, eps, res_scores_.data(), x);
  }
  std::memcpy(state.hidden().data(), x, std::size_t(hid) * sizeof(float));
  state.set_n_blocks(n_blocks);

  // logits = lm_head(norm(x))
  rms_norm(x, w_.final_norm.data(), hid, eps, h);
  matvec(exec_, w_.lm_head, h, logits.data());
  state.set_position(pos + 1);
  return ok();
}

}  // namespace waste::forward

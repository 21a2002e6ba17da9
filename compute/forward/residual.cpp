// The residual stream between blocks (residual.hpp).
#include "compute/forward/residual.hpp"

#include <cstring>

#include "compute/forward/attn_res.hpp"
#include "compute/forward/mhc.hpp"
#include "compute/forward/ops.hpp"
#include "compute/forward/scratch.hpp"
#include "shared/memory/client_sizing.hpp"

namespace waste::forward {

Residual::Residual(const ModelConfig& c, ResidualKind kind, const Exec& exec) : c_(c), kind_(kind), exec_(exec) {
  const sizing::ForwardSizes z = sizing::forward_sizes(c, 1);
  scores_.assign(z.res_scores, 0.0f);
  if (streams()) mhc_.assign(z.res_mhc, 0.0f);
}

void Residual::begin(float* x) const {
  if (!streams()) return;
  const std::size_t hid = std::size_t(c_.hidden);
  for (int k = 1; k < c_.hc_mult; ++k) std::memcpy(x + k * hid, x, hid * sizeof(float));
}

void Residual::mhc_site(const model::MhcWeights& w, const float* x, float* ps, float* h) {
  const int hc = c_.hc_mult;
  float* flat = mhc_.data();
  float* mix = flat + c_.stream_width();
  float* pre = mix + c_.hc_mix();
  mhc_coefficients(exec_, c_, w, x, flat, mix, pre, ps, ps + hc);
  mhc_collapse(pre, x, hc, c_.hidden, h);
}

void Residual::single_pass_site(const model::MhcWeights& w, const float* x, float* ps, float* h) {
  const int hc = c_.hc_mult;
  float* flat = mhc_.data();
  float* mix = flat + c_.stream_width();
  float* carried = ps + hc + hc * hc;
  mhc_single_pass_site(exec_, c_, w, x, carried, flat, mix, h, carried, ps, ps + hc);
}

bool Residual::before_attention(const model::LayerWeights& lw, int layer, float* x, float* ps, float* blocks,
                                int& n_blocks, float* h) {
  const int hid = c_.hidden;
  bool live = true;
  if (kind_ == ResidualKind::mhc_single_pass) {
    // h = input_layernorm(sum_k pre[k] x[k]) with the previous FFN site's pre (one-hot at
    // layer 0); this site's post, comb and pre wait in ps
    if (layer == 0) mhc_first_pre(c_.hc_mult, ps + c_.hc_mult + c_.hc_mult * c_.hc_mult);
    single_pass_site(lw.attn_hc, x, ps, h);
    rms_norm(h, lw.input_norm.data(), hid, c_.rms_eps, h);
    return live;
  }
  if (kind_ == ResidualKind::mhc) {
    // h = input_layernorm(sum_k pre[k] x[k]); post and comb wait in ps for the output
    mhc_site(lw.attn_hc, x, ps, h);
    rms_norm(h, lw.input_norm.data(), hid, c_.rms_eps, h);
    return live;
  }
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
  if (kind_ == ResidualKind::mhc_single_pass) {
    // x[i] = post[i] a + sum_k comb[k][i] x[k]; then the FFN site, collapsing with the
    // attention site's pre: h = post_attention_layernorm(...)
    mhc_expand(ps, ps + c_.hc_mult, a, x, c_.hc_mult, hid);
    single_pass_site(lw.ffn_hc, x, ps, h);
    rms_norm(h, lw.post_norm.data(), hid, c_.rms_eps, h);
    return;
  }
  if (kind_ == ResidualKind::mhc) {
    // x[i] = post[i] a + sum_k comb[k][i] x[k]; then the FFN site: h = post_attention_layernorm(...)
    mhc_expand(ps, ps + c_.hc_mult, a, x, c_.hc_mult, hid);
    mhc_site(lw.ffn_hc, x, ps, h);
    rms_norm(h, lw.post_norm.data(), hid, c_.rms_eps, h);
    return;
  }
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
  if (streams()) {
    mhc_expand(ps, ps + c_.hc_mult, f, x, c_.hc_mult, hid);  // x[i] = post[i] f + sum_k comb[k][i] x[k]
    return;
  }
  if (kind_ == ResidualKind::attn_res) {
    for (int i = 0; i < hid; ++i) ps[i] += f[i];  // x = ps = ps + f
    std::memcpy(x, ps, std::size_t(hid) * sizeof(float));
  } else {
    for (int i = 0; i < hid; ++i) x[i] += f[i];  // x = x + f
  }
}

void Residual::before_head(const model::ModelWeights& w, const float* ps, const float* blocks, int n_blocks, float* x,
                           float* kept) {
  if (kind_ == ResidualKind::mhc_single_pass) {
    // The streams collapsed with the last FFN site's pre (not their mean).
    const int hc = c_.hc_mult;
    std::memcpy(kept, x, std::size_t(c_.stream_width()) * sizeof(float));
    float* out = mhc_.data();
    mhc_collapse(ps + hc + hc * hc, x, hc, c_.hidden, out);
    std::memcpy(x, out, std::size_t(c_.hidden) * sizeof(float));
    return;
  }
  if (kind_ == ResidualKind::mhc) {
    std::memcpy(kept, x, std::size_t(c_.stream_width()) * sizeof(float));
    mhc_head(x, c_.hc_mult, c_.hidden, x);  // the mean of the streams
    return;
  }
  if (kind_ == ResidualKind::attn_res && n_blocks > 0) {
    attn_res(blocks, n_blocks, x, w.out_res_norm.data(), w.out_res_proj.data(), c_.hidden, c_.rms_eps,
             scores_.data(), x);
  }
  std::memcpy(kept, x, std::size_t(c_.hidden) * sizeof(float));
}

std::uint64_t Residual::bytes() const { return capacity_bytes(scores_, mhc_); }

}  // namespace waste::forward

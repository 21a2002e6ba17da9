// The residual stream between a layer's blocks (waste-v0-reference.md §3.3, §3.7), of the kind
// the family's plan names (ModelPlan::residual): how a layer's attention input is formed, how
// the attention and mixer outputs join the stream, and the stream's state before the head.
//   add       x = x + a; x = x + f                       (Kimi-Linear, DeepSeek-V3)
//   attn_res  Attention Residuals over block summaries   (K3; attn_res.hpp)
//   mhc       hc_mult streams, Sinkhorn-mixed            (GLM; mhc.hpp)
//   mhc_single_pass  the same streams, a site's pre collapsing them for the next site
//                    (DeepSeek-V4.1; mhc_single_pass_site); the head collapses with the last
//                    FFN site's pre
// Per token: x is the stream (ModelConfig::stream_width floats: hc_mult x hidden under mHC),
// ps the AttnRes partial sum (under mHC: the current site's post and comb coefficients, carried
// from a sublayer's input to its output; under the single pass followed by the pre carried to
// the next site, hc floats at hc + hc*hc), blocks the filed block summaries (n_blocks of them,
// the same count for every token of a layer).
#pragma once

#include <cstdint>
#include <vector>

#include "compute/forward/families/family.hpp"
#include "compute/forward/ops.hpp"
#include "compute/model/weights.hpp"
#include "shared/container/model_config.hpp"

namespace waste::forward {

class Residual {
 public:
  Residual(const ModelConfig& c, ResidualKind kind, const Exec& exec);

  // x[0..hidden) holds the token's embedding: mHC copies it into every stream.
  void begin(float* x) const;

  // Before attention: AttnRes mixes the filed blocks into x (a block boundary files ps away);
  // then h = input_layernorm(x). Returns whether ps carries on (false after a boundary).
  bool before_attention(const model::LayerWeights& lw, int layer, float* x, float* ps, float* blocks,
                        int& n_blocks, float* h);
  // The attention output a joins the stream; then h = post_attention_layernorm(x).
  void after_attention(const model::LayerWeights& lw, bool live, const float* a, float* x, float* ps,
                       const float* blocks, int n_blocks, float* h);
  // The mixer output f joins the stream.
  void after_mixer(const float* f, float* x, float* ps);
  // The stream before the final norm, into x[0..hidden): AttnRes's output mix over the filed
  // blocks, mHC's mean of the streams, or the single pass's collapse with the pre in ps.
  // `kept` (stream_width floats) receives what the sequence state keeps of it: the streams
  // before the mean under mHC, else the head input.
  void before_head(const model::ModelWeights& w, const float* ps, const float* blocks, int n_blocks, float* x,
                   float* kept);

  [[nodiscard]] std::uint64_t bytes() const;

 private:
  // mHC: one site's coefficients into ps (post, then comb), the collapsed streams into h.
  void mhc_site(const model::MhcWeights& w, const float* x, float* ps, float* h);
  // Single-pass mHC: h = the streams collapsed with the carried pre (in ps after post and
  // comb); then this site's post, comb and the next site's pre into ps.
  void single_pass_site(const model::MhcWeights& w, const float* x, float* ps, float* h);
  [[nodiscard]] bool streams() const { return kind_ == ResidualKind::mhc || kind_ == ResidualKind::mhc_single_pass; }

  const ModelConfig& c_;
  ResidualKind kind_;
  Exec exec_;
  std::vector<float> scores_;  // AttnRes candidate scores
  std::vector<float> mhc_;     // mHC: normed streams, mix, pre
};

}  // namespace waste::forward

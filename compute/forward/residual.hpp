// The residual stream between a layer's blocks (waste-v0-reference.md §3.3, §3.7), of the kind
// the family's plan names (ModelPlan::residual): how a layer's attention input is formed, how
// the attention and mixer outputs join the stream, and the stream's state before the head.
//   add       x = x + a; x = x + f                       (Kimi-Linear, DeepSeek-V3)
//   attn_res  Attention Residuals over block summaries   (K3; attn_res.hpp)
// Per token: x is the stream, ps the AttnRes partial sum, blocks the filed block summaries
// (n_blocks of them, the same count for every token of a layer).
#pragma once

#include <cstdint>
#include <vector>

#include "compute/forward/families/family.hpp"
#include "compute/model/weights.hpp"
#include "shared/container/model_config.hpp"

namespace waste::forward {

class Residual {
 public:
  Residual(const ModelConfig& c, ResidualKind kind);

  // Before attention: AttnRes mixes the filed blocks into x (a block boundary files ps away);
  // then h = input_layernorm(x). Returns whether ps carries on (false after a boundary).
  bool before_attention(const model::LayerWeights& lw, int layer, float* x, float* ps, float* blocks,
                        int& n_blocks, float* h);
  // The attention output a joins the stream; then h = post_attention_layernorm(x).
  void after_attention(const model::LayerWeights& lw, bool live, const float* a, float* x, float* ps,
                       const float* blocks, int n_blocks, float* h);
  // The mixer output f joins the stream.
  void after_mixer(const float* f, float* x, float* ps);
  // The stream before the final norm: AttnRes's output mix over the filed blocks.
  void before_head(const model::ModelWeights& w, const float* blocks, int n_blocks, float* x);

  [[nodiscard]] std::uint64_t bytes() const;

 private:
  const ModelConfig& c_;
  ResidualKind kind_;
  std::vector<float> scores_;  // AttnRes candidate scores
};

}  // namespace waste::forward

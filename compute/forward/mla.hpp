// Multi-head latent attention, kv_b absorbed (waste-v0-reference.md §3.5): NoPE (Kimi-Linear,
// K3) or with DeepSeek-V3's decoupled rotary (docs/design/deepseek.md). One token, a prefill
// chunk of one sequence, or a batch of several.
#pragma once

#include <span>

#include "compute/forward/ops.hpp"
#include "compute/forward/scratch.hpp"
#include "compute/forward/token_seq.hpp"
#include "compute/model/weights.hpp"

namespace waste::forward {

// Absorbed MLA for `n_tokens` consecutive tokens at positions pos0..: writes each token's
// [c, k_r] into latent cache slot pos0 + t, token t attends slots 0..pos0+t. x is the layer's
// normed input [n_tokens][hid], out gets [n_tokens][hid]. n_tokens <= s.tokens.
void mla_forward(const Exec& exec, const ModelConfig& c, const model::MlaWeights& w, const float* x, int n_tokens,
                 int pos0, float* latent_cache, MlaScratch& s, float* out);
// The same for a batch: token t uses seqs[t].state's latent cache of `layer` at seqs[t].pos.
void mla_forward(const Exec& exec, const ModelConfig& c, const model::MlaWeights& w, const float* x,
                 std::span<const TokenSeq> seqs, int layer, MlaScratch& s, float* out);

}  // namespace waste::forward

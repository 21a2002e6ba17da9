// Multi-head latent attention, kv_b absorbed (waste-v0-reference.md §3.5): NoPE (Kimi-Linear,
// K3) or with DeepSeek-V3's decoupled rotary (docs/design/deepseek.md). One token, a prefill
// chunk of one sequence, or a batch of several.
#pragma once

#include <cstdint>
#include <span>

#include "compute/forward/ops.hpp"
#include "compute/forward/scratch.hpp"
#include "compute/forward/token_seq.hpp"
#include "compute/model/weights.hpp"
#include "compute/runtime/function_ref.hpp"

namespace waste::forward {

// Sparse attention (GLM's k-pool DSA, kpool_indexer.hpp): the latent-cache positions each token
// of a call attends. Token t attends positions[t * stride ...], counts[t] of them, ascending and
// each <= its own position; the softmax runs over that set only (a token with none gets o = 0).
struct MlaPositions {
  const int* positions = nullptr;
  const int* counts = nullptr;
  std::int64_t stride = 0;
};
// mla_forward calls it once, after every token's q_lora residual rms(q_a x) ([n_tokens][q_lora])
// is computed and before any attention; the lists it returns must live until mla_forward returns.
using MlaSelect = FunctionRef<MlaPositions(const float* q_resid, int n_tokens)>;

// Absorbed MLA for `n_tokens` consecutive tokens at positions pos0..: writes each token's
// [c, k_r] into latent cache slot pos0 + t, token t attends slots 0..pos0+t. x is the layer's
// normed input [n_tokens][hid], out gets [n_tokens][hid]. n_tokens <= s.tokens. With `select`,
// each token attends only the positions it returns (q_lora > 0); without, every slot 0..pos.
void mla_forward(const Exec& exec, const ModelConfig& c, const model::MlaWeights& w, const float* x, int n_tokens,
                 int pos0, float* latent_cache, MlaScratch& s, float* out, const MlaSelect* select = nullptr);
// The same for a batch: token t uses seqs[t].state's latent cache of `layer` at seqs[t].pos.
void mla_forward(const Exec& exec, const ModelConfig& c, const model::MlaWeights& w, const float* x,
                 std::span<const TokenSeq> seqs, int layer, MlaScratch& s, float* out,
                 const MlaSelect* select = nullptr);

}  // namespace waste::forward

// Kimi Delta Attention, recurrent form (waste-v0-reference.md §3.4): the linear-attention block
// of Kimi-Linear and K3. One token, a prefill chunk of one sequence, or a batch of several.
#pragma once

#include <span>

#include "compute/forward/ops.hpp"
#include "compute/forward/scratch.hpp"
#include "compute/forward/token_seq.hpp"
#include "compute/model/run_state.hpp"
#include "compute/model/weights.hpp"

namespace waste::forward {

// The recurrent KDA (§3.4) of layer `layer` over `n_tokens` consecutive tokens, in order,
// updating its S and conv rings in `state`. x and out are [n_tokens][hid]; n_tokens <= s.tokens.
void kda_forward(const Exec& exec, const ModelConfig& c, const model::KdaWeights& w, const float* x, int n_tokens,
                 model::RunState& state, int layer, KdaScratch& s, float* out);
// The same for a batch: token t steps seqs[t].state (tokens of one state in order).
void kda_forward(const Exec& exec, const ModelConfig& c, const model::KdaWeights& w, const float* x,
                 std::span<const TokenSeq> seqs, int layer, KdaScratch& s, float* out);

}  // namespace waste::forward

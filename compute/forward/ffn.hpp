// The gated FFN: the dense layers' MLP and the MoE's shared experts.
#pragma once

#include "compute/forward/ops.hpp"
#include "compute/model/weights.hpp"

namespace waste::forward {

// Dense FFN (layers < first_k_dense_replace) and shared experts: down(act(gate x, up x)).
// a, b need `inter` floats.
void ffn_forward(const Exec& exec, const ModelConfig& c, const model::FfnWeights& w, const float* x, float* a,
                 float* b, float* out);

// ffn_forward for n tokens (row stride `hid` for x/out, `inter` for a/b), each trunk row chunk
// applied to every token while in cache; the same bits as ffn_forward per token.
void ffn_tokens(const Exec& exec, const ModelConfig& c, const model::FfnWeights& w, const float* x, int n, float* a,
                float* b, float* out);

}  // namespace waste::forward

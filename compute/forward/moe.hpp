// The MoE block (waste-v0-reference.md §3.6): the router's selection, routed experts by the RVQ
// table driver (rvq_driver.hpp), K3's latent projections, shared experts. moe_forward is one
// token (decode, moe.cpp); moe_prefill a chunk or batch, each distinct expert read once
// (moe_prefill.cpp). The same bits either way.
#pragma once

#include "compute/forward/ops.hpp"
#include "compute/forward/rvq_driver.hpp"
#include "compute/forward/scratch.hpp"
#include "compute/model/weights.hpp"
#include "compute/profile/profile.hpp"
#include "shared/result.hpp"

namespace waste::forward {

// Selection (§3.6 steps 1-3) on its own, for tests: ids in selection order, final weights.
// `image`: the token is an image-span token (fed with an embedding row); DeepSeek-V4.1 then
// selects with gate.bias_vl instead of the correction bias (as text when bias_vl is absent);
// every other family ignores it.
void route(const ModelConfig& c, const model::MoeWeights& w, const float* router_logits, MoeScratch& s,
           bool image = false);

// The `n` ids a router would pick first (router_scores + router_rank, as route()), for
// lookahead. scored/taken need E entries; ids gets the returned count, min(n, experts in the
// kept groups).
int top_ids(const ModelConfig& c, const model::MoeWeights& w, const float* router_logits, int n, float* scored,
             unsigned char* taken, int* ids);

// Decode-only extras of one MoE call: lookahead prefetch of the next layer and profiling.
struct MoeExtras {
  const model::MoeWeights* next = nullptr;  // layer+1's MoE weights, null = no lookahead
  int next_layer = -1;
  int lookahead = 0;                        // ids to prefetch
  profile::Stopwatch* watch = nullptr;
  bool image = false;                       // an image-span token (route()'s `image`)
};

// MoE block (§3.6): router, routed experts by RVQ LUT, K3 latent projections, shared experts.
// Experts are taken in landing order (acquire_next) into per-selection slots and summed in
// selection order, so the bits do not depend on which record lands first.
Status moe_forward(const Exec& exec, const ModelConfig& c, const model::MoeWeights& w, int layer, const float* x,
                   const ExpertContext& experts, MoeScratch& s, float* out, const MoeExtras& extras = {});

// MoE of a chunk (§3.10): route every token, read each distinct expert once (windows of
// `window` ids, landing order; each request prefetches the next window), apply it to every
// token that chose it, then per token sum in selection order. exec.prompt_rows (empty, or one flag
// per token): prompt tokens (non-zero) take prefill's matrix products under the per-token rule
// (expert_batch.hpp), the others that token's LUTs: moe_forward's bits per decode token, and per
// prompt token bits that do not depend on the other tokens of the pass.
// `embeddings` (empty, or one pointer per token, as Forward::prefill's): a token fed with an
// embedding row (non-null) is an image-span token, route()'s `image`.
// x and out are [n_tokens][hid]. Reads: exactly the chunk's distinct experts.
Status moe_prefill(const Exec& exec, const ModelConfig& c, const model::MoeWeights& w, int layer, const float* x,
                   int n_tokens, const ExpertContext& experts, MoeScratch& s, PrefillMoeScratch& p, float* out,
                   int window, profile::Stopwatch* watch = nullptr,
                   std::span<const float* const> embeddings = {});

}  // namespace waste::forward

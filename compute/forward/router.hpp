// The MoE router's selection, shared by routing (route) and the lookahead prefetch (top_ids),
// so both pick experts by one rule (docs/design/deepseek.md, "Routing"):
//   p = score(logits / gate_temp): sigmoid, softmax or sqrtsoftplus = sqrt(softplus(x));
//   s' = p + e_score_correction_bias (selection only);
//   with n_group > 1: group score = sum of its two largest s' (its largest s' without a bias),
//   keep the topk_group best groups; then the top-k s' among the kept groups' experts.
// Ties go to the lower index at every stage (groups and experts): a strict '>' scan.
//
// DeepSeek-V4.1's gate (noaux_tc, route_noaux): sqrtsoftplus scores, one flat top-k of
// p + bias where image-span tokens take the second bias `bias_vl`; the weights are the chosen
// experts' unbiased p, divided by (their sum + 1e-20) when renormalising, times route_scale.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "shared/container/model_config.hpp"
#include "shared/result.hpp"

namespace waste::forward {

// sqrt(softplus(x)), softplus(x) = log(1 + e^x) (x itself above 20, as torch's softplus).
float sqrt_softplus(float x);

// probs[e] = f(logits[e] / temp) for e < n, f the config's scoring (ModelConfig::scoring) (softmax over the n). temp 1 divides nothing:
// the bits of the plain f(logits). probs may alias logits.
void score_experts(RouterScoring f, const float* logits, int n, float temp, float* probs);

// probs[e] = the scoring function of the logits; scored[e] = probs[e] + bias[e] (bias may be
// empty). probs may alias logits' storage only when it is not needed after (it is not read).
void router_scores(const ModelConfig& c, std::span<const float> bias, const float* logits, float* probs,
                   float* scored);

// The first n experts by scored, in selection order, among the kept groups (taken: E bytes of
// scratch, 1 = masked or chosen). Returns how many were written: min(n, experts in kept groups).
int router_rank(const ModelConfig& c, bool has_bias, const float* scored, int n, unsigned char* taken, int* ids);

// The first n of E experts by scored without groups (the last stage of router_rank): n full
// scans, ties to the lower id. taken: E bytes of scratch. Returns min(n, E).
int router_rank_flat(const float* scored, int E, int n, unsigned char* taken, int* ids);

// DeepSeek-V4.1's gate (DeepseekV41TopKRouter): everything it reads besides the tensors.
struct NoauxRouter {
  RouterScoring score = RouterScoring::sqrtsoftplus;  // scoring_func
  int n_experts = 0;                                  // n_routed_experts
  int top_k = 0;                                      // num_experts_per_tok, 1..n_experts
  float gate_temp = 1.0f;                             // gate_temp: logits / gate_temp before score
  bool renormalize = true;                            // norm_topk_prob (only with top_k > 1)
  float route_scale = 1.0f;                           // routed_scaling_factor (1.5 released)
};

// Working buffers of route_noaux: probs, scored and taken [n_experts].
struct NoauxScratch {
  float* probs;
  float* scored;
  unsigned char* taken;
};

// One token: ids [top_k] in selection order (the top_k of score + bias, ties to the lower
// id), weights [top_k] from the unbiased scores. `image`: the token is inside an image span and
// selects with bias_vl instead of bias. Either bias may be empty (zeros); a non-empty one has
// n_experts entries.
void route_noaux(const NoauxRouter& r, const float* logits, std::span<const float> bias,
                 std::span<const float> bias_vl, bool image, const NoauxScratch& s, int* ids, float* weights);

}  // namespace waste::forward

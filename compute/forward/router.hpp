// The MoE router's selection, shared by routing (route) and the lookahead prefetch (top_ids),
// so both pick experts by one rule (docs/design/deepseek.md, "Routing"):
//   p = sigmoid(logits) or softmax(logits);  s' = p + e_score_correction_bias (selection only);
//   with n_group > 1: group score = sum of its two largest s' (its largest s' without a bias),
//   keep the topk_group best groups; then the top-k s' among the kept groups' experts.
// Ties go to the lower index at every stage (groups and experts): a strict '>' scan.
#pragma once

#include <span>

#include "shared/container/model_config.hpp"

namespace waste::forward {

// probs[e] = the scoring function of the logits; scored[e] = probs[e] + bias[e] (bias may be
// empty). probs may alias logits' storage only when it is not needed after (it is not read).
void router_scores(const ModelConfig& c, std::span<const float> bias, const float* logits, float* probs,
                   float* scored);

// The first n experts by scored, in selection order, among the kept groups (taken: E bytes of
// scratch, 1 = masked or chosen). Returns how many were written: min(n, experts in kept groups).
int router_rank(const ModelConfig& c, bool has_bias, const float* scored, int n, unsigned char* taken, int* ids);

}  // namespace waste::forward

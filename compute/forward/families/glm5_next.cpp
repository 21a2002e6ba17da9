// GLM-5.3-Flash (Glm5NextForConditionalGeneration, model_type glm5_next; text path). Blocks:
// - attention: KDA at the "linear_attention" layers (layer_types; K3's parameterisation: the
//   bounded sigmoid gate gate_lower_bound -5, low-rank g_a/g_b output gate), NoPE MLA at the
//   others (qk_rope_head_dim 0: no rotary anywhere, softmax scale 1/sqrt(qk_nope));
// - mixer: a dense FFN for the first layers (mlp_layer_types "dense" = first_k_dense_replace),
//   MoE after (sigmoid router with e_score_correction_bias, n_group 1, renormalised top-k times
//   routed_scaling_factor, one shared expert); every MLP's SwiGLU clamped at swiglu_limit
//   (ffn_activation, ops.hpp);
// - residual: mHC, hc_mult streams (ResidualKind::mhc, mhc.hpp); the head reads their mean.
//
// The DSA k-pool indexer (index_* keys) selects which cached positions an MLA layer attends.
// Below index_topk + the tail (2048 tokens in the release) it selects every position, so dense
// MLA is exactly what the model computes there; that is what this plan runs. The indexer plugs
// in at the MLA case of Forward::attention (forward.cpp, "indexer selection"), as its own
// AttentionKind set here for the full-attention layers.
#include "compute/forward/families/family.hpp"

namespace waste::forward {

// ModelConfig::arch is "glm5-next" for Glm5Next* architectures or model_type glm5_next; a
// config with hc_mult (mHC) is GLM's too: no other family has hyper-connections.
bool claims_glm5_next(const ModelConfig& c) { return c.arch == "glm5-next" || c.uses_mhc(); }

ModelPlan plan_glm5_next(const ModelConfig& c) {
  ModelPlan plan = v0_plan(c, "glm5-next");
  plan.residual = c.uses_mhc() ? ResidualKind::mhc : ResidualKind::add;
  return plan;
}

}  // namespace waste::forward

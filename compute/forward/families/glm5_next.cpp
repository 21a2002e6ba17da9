// GLM-5.3-Flash (Glm5NextForConditionalGeneration, model_type glm5_next; text path). Blocks:
// - attention: KDA at the "linear_attention" layers (layer_types; K3's parameterisation: the
//   bounded sigmoid gate gate_lower_bound -5, low-rank g_a/g_b output gate), NoPE MLA at the
//   others (qk_rope_head_dim 0: no rotary anywhere, softmax scale 1/sqrt(qk_nope));
// - mixer: a dense FFN for the first layers (mlp_layer_types "dense" = first_k_dense_replace),
//   MoE after (sigmoid router with e_score_correction_bias, n_group 1, renormalised top-k times
//   routed_scaling_factor, one shared expert); every MLP's SwiGLU clamped at swiglu_limit
//   (ffn_activation, ops.hpp);
// - residual: mHC, hc_mult streams (ResidualKind::mhc, mhc.hpp); the head reads their mean;
// - the DSA k-pool indexer (index_n_heads > 0) selects which cached positions each MLA layer
//   attends (LayerPlan::indexed; kpool_indexer.hpp): every position while a token sees no more
//   than index_topk / index_kpool complete pools (dense), the best-scoring pools and the
//   unfilled tail after.
#include "compute/forward/families/family.hpp"

namespace waste::forward {

// ModelConfig::arch is "glm5-next" for Glm5Next* architectures or model_type glm5_next; a
// config with hc_mult (mHC) is GLM's too: no other family has hyper-connections.
bool claims_glm5_next(const ModelConfig& c) { return c.arch == "glm5-next" || c.uses_mhc(); }

ModelPlan plan_glm5_next(const ModelConfig& c) {
  ModelPlan plan = v0_plan(c, "glm5-next");
  plan.residual = c.uses_mhc() ? ResidualKind::mhc : ResidualKind::add;
  if (c.has_indexer()) {
    for (LayerPlan& layer : plan.layers) layer.indexed = layer.attention == AttentionKind::mla;
  }
  return plan;
}

}  // namespace waste::forward

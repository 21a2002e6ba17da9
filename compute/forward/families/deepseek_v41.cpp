// DeepSeek-V4.1-Flash (DeepseekV41ForCausalLM, model_type deepseek_v41; text path). Blocks:
// - attention: CSA2 on every layer (AttentionKind::csa2, csa2.hpp), each layer's role
//   (compress ratio, KV source, index source, candidate source, uses candidates) decided here
//   once from compress_ratios, kv_source_layer_ids, index_source_layer_ids and
//   candidate_source_layer_id (LayerPlan::csa2);
// - mixer: MoE on every layer (sqrtsoftplus gate through route_noaux, router.hpp; one shared
//   expert; SwiGLU clamped at swiglu_limit);
// - residual: single-pass mHC (ResidualKind::mhc_single_pass): a site's pre collapses the
//   streams for the next sublayer; the head collapses with the last FFN site's pre;
// - Engram layers (engram_layer_ids): LayerPlan::engram, a spot before the layer's attention
//   (forward.cpp) that refuses until the Engram rows are wired.
#include <algorithm>

#include "compute/forward/families/family.hpp"

namespace waste::forward {

bool claims_deepseek_v41(const ModelConfig& c) { return c.is_deepseek_v41(); }

ModelPlan plan_deepseek_v41(const ModelConfig& c) {
  ModelPlan plan;
  plan.family = "deepseek-v4.1";
  plan.residual = c.hc_single_pass ? ResidualKind::mhc_single_pass : ResidualKind::mhc;
  const auto has = [](const std::vector<int>& ids, int l) { return std::find(ids.begin(), ids.end(), l) != ids.end(); };
  plan.layers.reserve(std::size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LayerPlan layer;
    layer.attention = AttentionKind::csa2;
    layer.mixer = c.is_moe(l) ? MixerKind::moe : MixerKind::dense_ffn;
    layer.engram = has(c.engram_layer_ids, l);
    Csa2Role& r = layer.csa2;
    r.ratio = std::size_t(l) < c.compress_ratios.size() ? c.compress_ratios[std::size_t(l)] : 0;
    r.kv_source = has(c.kv_source_layer_ids, l);
    r.index_source = has(c.index_source_layer_ids, l);
    r.candidate_source = c.candidate_source_layer_id == l;
    r.uses_candidates = r.index_source && c.candidate_source_layer_id >= 0 && l > c.candidate_source_layer_id;
    layer.kv_source = r.ratio > 0 ? c.kv_source_of(l) : -1;
    plan.layers.push_back(layer);
  }
  return plan;
}

}  // namespace waste::forward

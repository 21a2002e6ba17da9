// The family registry and the v0 container's layer rules (family.hpp).
#include "compute/forward/families/family.hpp"

#include <utility>

namespace waste::forward {
namespace {

struct Family {
  bool (*claims)(const ModelConfig&);
  ModelPlan (*plan)(const ModelConfig&);
};

// First match wins. A new family adds one line. DeepSeek-V4.1 (by arch) first, then GLM: its
// claim (hc_mult, which no family but V4.1 has) must win over an architecture name.
constexpr Family kFamilies[] = {
    {claims_deepseek_v41, plan_deepseek_v41},  // before GLM: V4.1 has hc_mult too
    {claims_glm5_next, plan_glm5_next},
    {claims_kimi_k3, plan_kimi_k3},
    {claims_kimi_linear, plan_kimi_linear},
    {claims_deepseek_v3, plan_deepseek_v3},
};

}  // namespace

ModelPlan v0_plan(const ModelConfig& c, std::string family) {
  ModelPlan plan;
  plan.family = std::move(family);
  plan.residual = c.uses_mhc()             ? ResidualKind::mhc
                  : c.attn_res_block > 0   ? ResidualKind::attn_res
                                           : ResidualKind::add;
  plan.layers.reserve(std::size_t(c.n_layers));
  for (int layer = 0; layer < c.n_layers; ++layer) {
    plan.layers.push_back(LayerPlan{c.is_kda(layer) ? AttentionKind::kda : AttentionKind::mla,
                                    c.is_moe(layer) ? MixerKind::moe : MixerKind::dense_ffn});
  }
  return plan;
}

ModelPlan plan_model(const ModelConfig& c) {
  for (const Family& f : kFamilies) {
    if (f.claims(c)) return f.plan(c);
  }
  return v0_plan(c, "v0");
}

}  // namespace waste::forward

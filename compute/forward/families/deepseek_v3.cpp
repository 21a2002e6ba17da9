// DeepSeek-V3 / R1 and Kimi-K2 (DeepseekV3ForCausalLM; docs/design/deepseek.md). Blocks: MLA at
// every layer (no kda_layers) with the decoupled rotary on the qk_rope dims (RoPE / YaRN,
// rope.hpp); a dense FFN below first_k_dense_replace, MoE from there on with the group-limited
// router (n_group / topk_group, router.hpp) and softmax or sigmoid scoring; plain residual adds.
#include "compute/forward/families/family.hpp"

namespace waste::forward {

// ModelConfig::arch keeps the raw architectures[0] for these ("DeepseekV3ForCausalLM").
bool claims_deepseek_v3(const ModelConfig& c) { return c.arch.find("Deepseek") != std::string::npos; }

ModelPlan plan_deepseek_v3(const ModelConfig& c) { return v0_plan(c, "deepseek-v3"); }

}  // namespace waste::forward

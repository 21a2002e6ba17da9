// Kimi K3 (KimiK3ForConditionalGeneration). Kimi-Linear's block layout (KDA and NoPE MLA,
// dense then MoE) with what K3 adds, each read by its block from the config:
// - residual: Attention Residuals every attn_res_block_size layers (attn_res.hpp, residual.hpp);
// - MoE: a latent expert input (routed_expert_hidden_size: latent_down / norm / latent_up
//   around the routed experts, moe.cpp) and the SiTU activation;
// - KDA: the full-rank g_proj output gate and the bounded sigmoid gate (gate_lower_bound);
// - MLA: the per-head output gate (mla_use_output_gate).
#include "compute/forward/families/family.hpp"

namespace waste::forward {

bool claims_kimi_k3(const ModelConfig& c) { return c.arch == "kimi-k3"; }

ModelPlan plan_kimi_k3(const ModelConfig& c) { return v0_plan(c, "kimi-k3"); }

}  // namespace waste::forward

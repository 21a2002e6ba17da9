// Kimi-Linear (KimiLinearForCausalLM; waste-v0-reference.md §3). Blocks: KDA (kda.hpp) at
// linear_attn_config.kda_layers, NoPE MLA (mla.hpp) at the others; a dense FFN (ffn.hpp) below
// first_k_dense_replace, MoE (moe.hpp: sigmoid router with e_score_correction_bias, routed
// experts on the hidden x, shared experts) from there on; plain residual adds. The KDA output
// gate is the low-rank g_a/g_b pair.
#include "compute/forward/families/family.hpp"

namespace waste::forward {

bool claims_kimi_linear(const ModelConfig& c) { return c.arch == "kimi-linear"; }

ModelPlan plan_kimi_linear(const ModelConfig& c) { return v0_plan(c, "kimi-linear"); }

}  // namespace waste::forward

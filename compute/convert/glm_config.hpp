// GLM-5.3-Flash (`Glm5NextForConditionalGeneration`, model_type glm5_next / glm5_next_text):
// the config keys a v0 manifest states differently from the release (model-families.md §1.1,
// "converter traps"), rewritten in the flattened text config before ModelConfig reads it.
//
//   * linear_attn_config.kda_layers is 0-based in the release and 1-based in a manifest: both
//     kda_layers and full_attn_layers are rebuilt (1-based) from `layer_types`, which is
//     unambiguous ("linear_attention" = KDA; "deepseek_sparse_attention" / "full_attention" =
//     MLA). A release kda_layers that disagrees with layer_types is refused.
//   * first_k_dense_replace from `mlp_layer_types` (a run of "dense" then only "sparse").
//   * linear_attn_config.{num_heads, head_dim, short_conv_kernel_size, gate_lower_bound} from the
//     release's linear_attn_config (`lower_bound`, `safe_gate`) or the flat `linear_*` keys, with
//     the release class's defaults (lower bound -5.0).
//   * eos_token_id / bos_token_id / pad_token_id taken from the outer config when the text config
//     lacks them (eos_token_id stays a list: ModelConfig reads the list).
// GLM-only keys (hc_mult, hc_sinkhorn_iters, hc_eps, swiglu_limit, index_*) are left as they
// are: they are HF keys and the manifest's config is the text config verbatim.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "shared/result.hpp"

namespace waste::convert {

// True for a GLM-5.3-Flash text config (or its outer config).
bool is_glm_config(const nlohmann::json& outer, const nlohmann::json& text);

// Rewrites `text` (the flattened text config) in place; errors name the key.
Status normalize_glm_text_config(nlohmann::json& text, const nlohmann::json& outer);

}  // namespace waste::convert

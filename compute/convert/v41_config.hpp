// DeepSeek-V4.1-Flash (`DeepseekV41ForCausalLM`, model_type deepseek_v41 / deepseek_v41_text):
// the release's config and tensor names as a v0 container states them (model-families.md §2.1,
// §2.3; the release's safetensors inventory).
//
// Config (nested under text_config; the converter flattens it): eos/bos/pad from the outer config
// when the text config lacks them; `attn_sink: true` and `hc_single_pass: true` added (the
// public engine's manifest keys: every V4.1 layer has a per-head sink and the single-pass mHC;
// the sinks are then required as tensors, refused by name when missing). Every other key is an
// HF key that ModelConfig reads as it is (compress_ratios with the draft layers' zeros, the
// source lists, candidate_*, engram_*, scoring_func sqrtsoftplus).
//
// Tensor names: the release stores the vendor's names without a "model." head. The container is
// prefix-less and names them in the engine's convention:
//
//   embed.weight / norm.weight / head.weight   -> model.embed_tokens.weight / model.norm.weight / lm_head.weight
//   hc_head_{fn,base,scale}                    -> model.hc_head_{fn,base,scale}
//   layers.N.attn_norm.weight                  -> model.layers.N.input_layernorm.weight
//   layers.N.ffn_norm.weight                   -> model.layers.N.post_attention_layernorm.weight
//   layers.N.attn.X                            -> model.layers.N.self_attn.X   (wq_a, q_norm, wq_b, wkv, kv_norm,
//                                                 wo_a, wo_b, attn_sink, compressor.*, indexer.*: names kept)
//   layers.N.ffn.gate.weight / .bias / .bias_vl -> model.layers.N.block_sparse_moe.gate.weight /
//                                                 .e_score_correction_bias / .bias_vl
//   layers.N.ffn.shared_experts.w1 / w3 / w2   -> model.layers.N.block_sparse_moe.shared_experts.gate_proj /
//                                                 up_proj / down_proj
//   layers.N.ffn.experts.E.w1 / w3 / w2        -> the expert bank (gate / up / down)
//   layers.N.hc_{attn,ffn}_{fn,base,scale}     -> model.layers.N.hc_{attn,ffn}_{fn,base,scale}
//   layers.N.engram.{wkv.weight,q_weight,k_weight} -> model.layers.N.engram.{...}
//   layers.N.engram.embed.weight               -> engram-L{N}.bin (compute/convert/engram_table.hpp)
//   `.scale` companions                        -> decoded with their weight, not stored
//   mtp.* (DSpark draft stages)                -> left out (no reader)
//   vision.*, aligner.*, image_*               -> left out (the text container carries no vision tower)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/container/model_config.hpp"
#include "shared/result.hpp"

namespace waste::convert {

// True for a DeepSeek-V4.1 config (outer or text).
bool is_v41_config(const nlohmann::json& outer, const nlohmann::json& text);

// Rewrites `text` (the flattened text config) in place; errors name the key.
Status normalize_v41_text_config(nlohmann::json& text, const nlohmann::json& outer);

enum class V41Kind : std::uint8_t { trunk, companion, expert, engram_table, mtp, vision, unknown };

// What a release tensor is, and its container name (trunk only).
struct V41Name {
  V41Kind kind = V41Kind::unknown;
  std::string name;
};
V41Name v41_classify(const std::string& hf_name, int n_layers);

// The release's name of routed expert `e`'s matrix (kind 0 gate = w1, 1 up = w3, 2 down = w2).
std::string v41_expert_weight_name(int layer, int expert, int kind);
// The release's name of engram layer `layer`'s table.
std::string v41_engram_table_name(int layer);

// The trunk tensors a V4.1 container must hold, with their shapes: shared/container/v41_tensors.hpp
// (v41_trunk_tensors), the one list the converter, `waste synth` and the engine's bind use.

}  // namespace waste::convert

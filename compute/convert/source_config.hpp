// The checkpoint's config.json, normalised into what a v0 manifest stores (reference §1.2, §8):
// K3's nested text_config flattened with the other outer keys under `_outer` and tensor prefix
// `language_model.`; DeepSeek-V3 / Kimi-K2 key names mapped to the Kimi ones the engine reads
// (n_routed_experts -> num_experts, num_experts_per_tok -> num_experts_per_token,
// n_shared_experts -> num_shared_experts, norm_topk_prob -> moe_renormalize), and their MoE
// tensor names (mlp.gate / mlp.experts.E.{gate,up,down}_proj / mlp.shared_experts) mapped to
// block_sparse_moe.gate / experts.E.{w1,w3,w2} / shared_experts.
//
// GLM-5.3-Flash (compute/convert/glm_config.hpp for its config keys): the checkpoint nests the text
// model as `model.language_model.layers.N...` with a top-level `lm_head.weight`; the container is
// prefix-less (tensor_prefix "") and stores `model.layers.N...`, `model.embed_tokens.weight`,
// `model.norm.weight`, `lm_head.weight`, MoE names mapped as for DeepSeek, every other name (mHC
// `hc_attn_fn/base/scale`, `hc_ffn_*`, KDA, MLA, the indexer) unchanged after the unnesting. The
// MTP layer (index >= num_hidden_layers) and the vision tower (`model.visual.*`) are not kept.
//
// DeepSeek-V4.1-Flash: compute/convert/v41_config.hpp (config keys and the release's vendor names).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "compute/convert/dtype_decode.hpp"
#include "shared/container/model_config.hpp"
#include "shared/result.hpp"

namespace waste::convert {

enum class SourceFamily : std::uint8_t { kimi, deepseek, glm, deepseek_v41 };

struct SourceConfig {
  nlohmann::json config;        // as stored in the manifest
  ModelConfig model;
  std::string prefix;           // "" or "language_model."
  SourceFamily family = SourceFamily::kimi;
  BlockSize fp8_block;          // quantization_config.weight_block_size, if any
  // The checkpoint's spelling of the text model's "model." head: prefix + "model." (Kimi, K3,
  // DeepSeek) or "model.language_model." (GLM, stored as "model.").
  std::string source_head = "model.";
};

// Checkpoint configs nest a few levels (text_config, quantization_config, rope_scaling); a deeper
// one is refused before it is copied (a copy recurses once per level and could exhaust the stack).
inline constexpr int kMaxConfigDepth = 64;

Result<SourceConfig> normalize_config(const nlohmann::json& raw);
Result<SourceConfig> load_source_config(const std::filesystem::path& config_json);

// engram_table: a DeepSeek-V4.1 Engram table, written to engram-L{n}.bin instead of the trunk.
enum class DropReason : std::uint8_t { kept, companion, mtp, vision, engram_table };
// Why a checkpoint tensor is not kept (kept when it is).
DropReason drop_reason(const SourceConfig& source, const std::string& hf_name);
// The container name of a checkpoint tensor (DeepSeek MoE names mapped, GLM unnested), or nullopt
// for a tensor the container does not keep: MTP layers (index >= num_hidden_layers), fp8/MXFP4
// companions (`*_scale_inv`, `*.weight_packed`, `*.weight_scale`; a learned `hc_attn_scale` is a
// weight, not a companion), GLM's vision tower.
std::optional<std::string> container_name(const SourceConfig& source, const std::string& hf_name);
// The checkpoint name of routed expert `e`'s matrix (kind 0 gate, 1 up, 2 down) in `layer`.
std::string expert_weight_name(const SourceConfig& source, int layer, int expert, int kind);

}  // namespace waste::convert

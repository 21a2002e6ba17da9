// The rotary embedding of the MLA qk_rope dims, as the DeepSeek-V3 family configures it
// (rope_theta, rope_scaling of type "yarn", mla_use_nope): parsed and refused here, computed in
// compute/forward/rope.*. docs/design/deepseek.md has the maths and the refusal rules.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "shared/result.hpp"

namespace waste {

// The largest qk_rope_head_dim a rotary model may have: the forward pass keeps one angle table
// per token on the stack (real models use 64).
inline constexpr int kMaxRopeDim = 1024;

struct RopeConfig {
  bool enabled = false;        // rotate the qk_rope dims; false = NoPE (Kimi-Linear, K3, every v0 container)
  double theta = 10000.0;      // rope_theta
  bool yarn = false;           // rope_scaling type "yarn"
  double factor = 1.0;         // rope_scaling.factor
  int original_max_pos = 0;    // rope_scaling.original_max_position_embeddings
  double beta_fast = 32.0;     // rope_scaling.beta_fast
  double beta_slow = 1.0;      // rope_scaling.beta_slow
  double mscale = 1.0;         // rope_scaling.mscale
  double mscale_all_dim = 0.0; // rope_scaling.mscale_all_dim
  bool truncate = true;        // rope_scaling.truncate: floor/ceil the correction range

  // YaRN's m = 0.1 * mscale_all_dim * ln(factor) + 1 (1 without YaRN or for factor <= 1); the
  // softmax scale is m^2 / sqrt(qk_nope + qk_rope).
  [[nodiscard]] double attention_mscale() const;
};

// `text` is the (flattened) config object, `where` its name in errors ("config"). deepseek:
// the architecture is DeepSeek-V3-family, where an absent mla_use_nope means rotary on.
// Errors name the key: "config.rope_scaling: type \"linear\" is not supported (only yarn)".
Result<RopeConfig> parse_rope_config(const nlohmann::json& text, const std::string& where, bool deepseek,
                                     int qk_rope);

// The JSON keys parse_rope_config reads, written back into `j` (used by ModelConfig::to_json).
void rope_config_to_json(const RopeConfig& rope, nlohmann::json& j);

}  // namespace waste

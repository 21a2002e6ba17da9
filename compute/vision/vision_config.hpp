// The K3 vision tower's geometry, read from the container's vision.json (reference §3.11).
// The tower norms' eps is not read: the engine uses float32 epsilon (what nn.RMSNorm without
// eps gives) and 1e-5 for the projector's post_norm, as the reference engine does.
#pragma once

#include <array>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "shared/result.hpp"

namespace waste::vision {

inline constexpr float kTowerNormEps = 1.1920928955078125e-07f;  // torch.finfo(float32).eps
inline constexpr float kPostNormEps = 1e-5f;

struct VisionConfig {
  int hidden = 1024;          // vt_hidden_size
  int heads = 12;             // vt_num_attention_heads
  int qkv_hidden = 1536;      // qkv_hidden_size (heads x head_dim)
  int inter = 4096;           // vt_intermediate_size
  int layers = 27;            // vt_num_hidden_layers
  int pos_h = 64, pos_w = 64; // init_pos_emb_height / width: the learned grid
  int patch = 14;             // patch_size
  int text_hidden = 0;        // text_hidden_size: the projector's output width
  int max_patches = 1024;     // patch budget per image (before the 2x2 merge)
  int media_pad_id = 163605;  // media_placeholder_token_id
  std::array<float, 3> mean{0.5f, 0.5f, 0.5f};
  std::array<float, 3> std{0.5f, 0.5f, 0.5f};

  [[nodiscard]] int head_dim() const { return qkv_hidden / heads; }
  [[nodiscard]] int patch_values() const { return 3 * patch * patch; }

  // `where` names the source in errors (the file path).
  static Result<VisionConfig> from_json(const nlohmann::json& j, const std::string& where);
  // <dir>/vision.json; an error naming the path when absent or malformed.
  static Result<VisionConfig> load(const std::filesystem::path& container_dir);
};

}  // namespace waste::vision

#include "compute/vision/vision_config.hpp"

#include "shared/container/file_io.hpp"

namespace waste::vision {
namespace {

using nlohmann::json;

Status read_int(const json& j, const char* key, int lo, int hi, int& out, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return {};  // the engine's fallback default stays
  if (!it->is_number_integer()) return make_error(Errc::format, where + ": \"" + key + "\" is not an integer");
  const auto v = it->get<std::int64_t>();
  if (v < lo || v > hi) {
    return make_error(Errc::format, where + ": \"" + key + "\" = " + std::to_string(v) + " is out of range " +
                                        std::to_string(lo) + ".." + std::to_string(hi));
  }
  out = int(v);
  return {};
}

Status read_triple(const json& j, const char* key, std::array<float, 3>& out, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return {};
  if (!it->is_array() || it->size() != 3) return make_error(Errc::format, where + ": \"" + key + "\" is not 3 numbers");
  for (int c = 0; c < 3; ++c) {
    if (!(*it)[c].is_number()) return make_error(Errc::format, where + ": \"" + key + "\" is not 3 numbers");
    out[c] = (*it)[c].get<float>();
  }
  return {};
}

}  // namespace

Result<VisionConfig> VisionConfig::from_json(const json& j, const std::string& where) {
  if (!j.is_object()) return make_error(Errc::format, where + ": not a JSON object");
  VisionConfig c;
  WASTE_TRY(read_int(j, "vt_hidden_size", 1, 1 << 14, c.hidden, where));
  WASTE_TRY(read_int(j, "vt_num_attention_heads", 1, 256, c.heads, where));
  WASTE_TRY(read_int(j, "qkv_hidden_size", 1, 1 << 14, c.qkv_hidden, where));
  WASTE_TRY(read_int(j, "vt_intermediate_size", 1, 1 << 16, c.inter, where));
  WASTE_TRY(read_int(j, "vt_num_hidden_layers", 1, 256, c.layers, where));
  WASTE_TRY(read_int(j, "init_pos_emb_height", 1, 1024, c.pos_h, where));
  WASTE_TRY(read_int(j, "init_pos_emb_width", 1, 1024, c.pos_w, where));
  WASTE_TRY(read_int(j, "patch_size", 1, 128, c.patch, where));
  WASTE_TRY(read_int(j, "text_hidden_size", 1, 1 << 16, c.text_hidden, where));
  WASTE_TRY(read_int(j, "max_patches", 4, 1 << 16, c.max_patches, where));
  WASTE_TRY(read_int(j, "media_placeholder_token_id", 0, 1 << 30, c.media_pad_id, where));
  WASTE_TRY(read_triple(j, "image_mean", c.mean, where));
  WASTE_TRY(read_triple(j, "image_std", c.std, where));
  if (c.text_hidden == 0) return make_error(Errc::format, where + ": \"text_hidden_size\" is missing");
  if (c.qkv_hidden % c.heads != 0 || c.head_dim() % 4 != 0) {
    return make_error(Errc::format, where + ": qkv_hidden_size " + std::to_string(c.qkv_hidden) +
                                        " is not heads x a head dim divisible by 4 (2-D RoPE)");
  }
  for (float s : c.std) {
    if (!(s > 0.0f)) return make_error(Errc::format, where + ": \"image_std\" must be positive");
  }
  return c;
}

Result<VisionConfig> VisionConfig::load(const std::filesystem::path& dir) {
  const auto path = dir / "vision.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return make_error(Errc::format, path.string() + ": missing (the container has no vision tower)");
  }
  auto text = read_text_file(path, 1 << 20);
  if (!text) return std::unexpected(text.error());
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded()) return make_error(Errc::format, path.string() + ": not valid JSON");
  return from_json(j, path.string());
}

}  // namespace waste::vision

#include "compute/convert/v41_config.hpp"

#include <algorithm>
#include <charconv>
#include <string_view>

namespace waste::convert {
namespace {

using json = nlohmann::json;

bool names_v41(const json& o) {
  if (!o.is_object()) return false;
  if (auto mt = o.find("model_type"); mt != o.end() && mt->is_string()) {
    const auto t = mt->get<std::string>();
    if (t == "deepseek_v41" || t == "deepseek_v41_text") return true;
  }
  if (auto a = o.find("architectures"); a != o.end() && a->is_array() && !a->empty() && a->front().is_string()) {
    return a->front().get<std::string>().find("DeepseekV41") != std::string::npos;
  }
  return false;
}

// "layers.<N>.<rest>" -> N and rest; -1 otherwise.
int split_layer(std::string_view name, std::string_view head, std::string_view& rest) {
  if (!name.starts_with(head)) return -1;
  name.remove_prefix(head.size());
  int layer = -1;
  auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
  if (ec != std::errc() || p == name.data() + name.size() || *p != '.') return -1;
  rest = std::string_view(p + 1, std::size_t(name.data() + name.size() - (p + 1)));
  return layer;
}

}  // namespace

bool is_v41_config(const json& outer, const json& text) { return names_v41(outer) || names_v41(text); }

Status normalize_v41_text_config(json& text, const json& outer) {
  for (const char* key : {"eos_token_id", "bos_token_id", "pad_token_id"}) {
    if (!text.contains(key) && outer.is_object() && outer.contains(key)) text[key] = outer[key];
  }
  if (text.contains("attn_sink") && !text["attn_sink"].is_boolean()) {
    return make_error(Errc::format, "config.json: attn_sink " + text["attn_sink"].dump() + " is not a boolean");
  }
  text["attn_sink"] = true;
  text["hc_single_pass"] = true;
  return {};
}

V41Name v41_classify(const std::string& hf, int n_layers) {
  if (hf.ends_with(".scale")) return {V41Kind::companion, {}};
  if (hf.starts_with("mtp.")) return {V41Kind::mtp, {}};
  if (hf.starts_with("vision.") || hf.starts_with("aligner.") || hf.starts_with("image_")) return {V41Kind::vision, {}};
  if (hf == "embed.weight") return {V41Kind::trunk, "model.embed_tokens.weight"};
  if (hf == "norm.weight") return {V41Kind::trunk, "model.norm.weight"};
  if (hf == "head.weight") return {V41Kind::trunk, "lm_head.weight"};
  if (hf.starts_with("hc_head_")) return {V41Kind::trunk, "model." + hf};
  std::string_view rest;
  const int layer = split_layer(hf, "layers.", rest);
  if (layer < 0) return {V41Kind::unknown, {}};
  if (layer >= n_layers) return {V41Kind::mtp, {}};
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  if (rest == "attn_norm.weight") return {V41Kind::trunk, p + "input_layernorm.weight"};
  if (rest == "ffn_norm.weight") return {V41Kind::trunk, p + "post_attention_layernorm.weight"};
  if (rest.starts_with("attn.")) return {V41Kind::trunk, p + "self_attn." + std::string(rest.substr(5))};
  if (rest.starts_with("hc_attn_") || rest.starts_with("hc_ffn_")) return {V41Kind::trunk, p + std::string(rest)};
  if (rest == "engram.embed.weight") return {V41Kind::engram_table, {}};
  if (rest.starts_with("engram.")) return {V41Kind::trunk, p + std::string(rest)};
  if (rest.starts_with("ffn.experts.")) return {V41Kind::expert, {}};
  const std::string m = p + "block_sparse_moe.";
  if (rest == "ffn.gate.weight") return {V41Kind::trunk, m + "gate.weight"};
  if (rest == "ffn.gate.bias") return {V41Kind::trunk, m + "gate.e_score_correction_bias"};
  if (rest == "ffn.gate.bias_vl") return {V41Kind::trunk, m + "gate.bias_vl"};
  if (rest == "ffn.shared_experts.w1.weight") return {V41Kind::trunk, m + "shared_experts.gate_proj.weight"};
  if (rest == "ffn.shared_experts.w3.weight") return {V41Kind::trunk, m + "shared_experts.up_proj.weight"};
  if (rest == "ffn.shared_experts.w2.weight") return {V41Kind::trunk, m + "shared_experts.down_proj.weight"};
  return {V41Kind::unknown, {}};
}

std::string v41_expert_weight_name(int layer, int expert, int kind) {
  static constexpr const char* kW[3] = {"w1", "w3", "w2"};
  return "layers." + std::to_string(layer) + ".ffn.experts." + std::to_string(expert) + "." + kW[kind] + ".weight";
}

std::string v41_engram_table_name(int layer) { return "layers." + std::to_string(layer) + ".engram.embed.weight"; }

}  // namespace waste::convert

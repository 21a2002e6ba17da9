#include "compute/convert/source_config.hpp"

#include <algorithm>
#include <charconv>
#include <utility>
#include <vector>

#include "compute/convert/glm_config.hpp"
#include "compute/convert/v41_config.hpp"
#include "shared/container/file_io.hpp"
#include "shared/json_depth.hpp"

namespace waste::convert {
namespace {

using json = nlohmann::json;

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// "<head>layers.<L>." -> L, or -1.
int layer_of(std::string_view name, std::string_view head) {
  if (!name.starts_with(head)) return -1;
  name.remove_prefix(head.size());
  if (!name.starts_with("layers.")) return -1;
  name.remove_prefix(7);
  int layer = -1;
  auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
  if (ec != std::errc() || p == name.data() + name.size() || *p != '.') return -1;
  return layer;
}

void rename_key(json& c, const char* from, const char* to) {
  if (c.contains(from) && !c.contains(to)) c[to] = c[from];
}

}  // namespace

Result<SourceConfig> normalize_config(const json& raw) {
  if (!raw.is_object()) return make_error(Errc::format, "config.json: not a JSON object");
  if (nested_deeper_than(raw, kMaxConfigDepth)) {
    return make_error(Errc::format, "config.json: nested deeper than " + std::to_string(kMaxConfigDepth) +
                                        " levels (the limit for a checkpoint config)");
  }
  SourceConfig s;
  const bool nested = raw.contains("text_config") && raw["text_config"].is_object();
  json config = nested ? raw["text_config"] : raw;
  const bool glm = is_glm_config(raw, config);
  const bool v41 = !glm && is_v41_config(raw, config);
  if (nested) {
    json outer = raw;
    outer.erase("text_config");
    config["_outer"] = outer;
    s.prefix = glm || v41 ? "" : "language_model.";
  }
  if (glm) {
    s.family = SourceFamily::glm;
    s.source_head = "model.language_model.";
    WASTE_TRY(normalize_glm_text_config(config, raw));
  } else if (v41) {
    s.source_head = "";  // the release's names have no head: layers.N..., embed.weight, head.weight
    WASTE_TRY(normalize_v41_text_config(config, raw));
  } else {
    s.source_head = s.prefix + "model.";
  }
  // The keys read here, before ModelConfig checks the rest: a wrong type is refused by name
  // (nlohmann's value() throws on one).
  std::string model_type;
  if (const auto it = config.find("model_type"); it != config.end()) {
    if (!it->is_string()) return make_error(Errc::format, "config.json: \"model_type\" is not a string");
    model_type = it->get<std::string>();
  }
  if (const auto it = config.find("norm_topk_prob"); it != config.end() && !it->is_boolean()) {
    return make_error(Errc::format, "config.json: \"norm_topk_prob\" is not a boolean");
  }
  std::string arch0;
  if (config.contains("architectures") && config["architectures"].is_array() && !config["architectures"].empty() &&
      config["architectures"][0].is_string()) {
    arch0 = config["architectures"][0].get<std::string>();
  }
  if (glm || v41 || contains(arch0, "Deepseek") || model_type == "deepseek_v3" || model_type == "kimi_k2") {
    if (!glm) s.family = v41 ? SourceFamily::deepseek_v41 : SourceFamily::deepseek;
    rename_key(config, "n_routed_experts", "num_experts");
    rename_key(config, "num_experts_per_tok", "num_experts_per_token");
    rename_key(config, "n_shared_experts", "num_shared_experts");
    // The engine presence-tests moe_renormalize; only a true norm_topk_prob may create it.
    if (config.value("norm_topk_prob", false) && !config.contains("moe_renormalize")) config["moe_renormalize"] = true;
  }
  const json* qc = nullptr;
  if (config.contains("quantization_config") && config["quantization_config"].is_object()) {
    qc = &config["quantization_config"];
  } else if (nested && raw.contains("quantization_config") && raw["quantization_config"].is_object()) {
    qc = &raw["quantization_config"];
  }
  if (qc && qc->contains("weight_block_size")) {
    const json& b = (*qc)["weight_block_size"];
    auto in_range = [](const json& v) {
      return v.is_number_integer() && v.get<std::int64_t>() >= 1 && v.get<std::int64_t>() <= 65536;
    };
    if (!b.is_array() || b.size() != 2 || !in_range(b[0]) || !in_range(b[1])) {
      return make_error(Errc::format, "config.json: quantization_config.weight_block_size must be two integers in 1..65536");
    }
    s.fp8_block = {int(b[0].get<std::int64_t>()), int(b[1].get<std::int64_t>())};
  }
  auto model = ModelConfig::from_json(config);
  if (!model) return std::unexpected(model.error().with_context("config.json"));
  s.model = std::move(*model);
  s.config = std::move(config);
  return s;
}

Result<SourceConfig> load_source_config(const std::filesystem::path& config_json) {
  auto text = read_text_file(config_json, 16u << 20);
  if (!text) return std::unexpected(text.error());
  json raw = json::parse(*text, nullptr, false);
  if (raw.is_discarded()) return make_error(Errc::format, config_json.string() + ": not valid JSON");
  auto s = normalize_config(raw);
  if (!s) return std::unexpected(s.error());
  return s;
}

DropReason drop_reason(const SourceConfig& source, const std::string& hf_name) {
  if (source.family == SourceFamily::deepseek_v41) {
    switch (v41_classify(hf_name, source.model.n_layers).kind) {
      case V41Kind::companion: return DropReason::companion;
      case V41Kind::mtp: return DropReason::mtp;
      case V41Kind::vision: return DropReason::vision;
      case V41Kind::engram_table: return DropReason::engram_table;
      default: return DropReason::kept;
    }
  }
  // Companions: fp8 block scales and MXFP4 pairs. Only `.weight_scale` is one: GLM's learned
  // `hc_attn_scale` / `hc_ffn_scale` also end in "_scale" and are weights.
  if (hf_name.ends_with("_scale_inv") || hf_name.ends_with("_packed") || hf_name.ends_with(".weight_scale")) {
    return DropReason::companion;
  }
  if (source.family == SourceFamily::glm && !hf_name.starts_with(source.source_head) && hf_name != "lm_head.weight") {
    return DropReason::vision;  // model.visual.*: the text container carries no vision tower
  }
  if (layer_of(hf_name, source.source_head) >= source.model.n_layers) return DropReason::mtp;  // DeepSeek-V3 61, GLM 45
  return DropReason::kept;
}

std::optional<std::string> container_name(const SourceConfig& source, const std::string& hf_name) {
  if (drop_reason(source, hf_name) != DropReason::kept) return std::nullopt;
  if (source.family == SourceFamily::deepseek_v41) {
    auto v = v41_classify(hf_name, source.model.n_layers);
    if (v.kind != V41Kind::trunk) return std::nullopt;  // experts (banks), names the container has no use for
    return v.name;
  }
  const int layer = layer_of(hf_name, source.source_head);
  std::string name = hf_name;
  if (source.family == SourceFamily::glm && name.starts_with(source.source_head)) {
    name = source.prefix + "model." + name.substr(source.source_head.size());
  }
  if (source.family == SourceFamily::kimi || layer < 0 || !source.model.is_moe(layer)) return name;
  const std::string layer_head = source.prefix + "model.layers." + std::to_string(layer) + ".";
  std::string rest = name.substr(layer_head.size());
  if (rest.starts_with("mlp.")) rest = "block_sparse_moe." + rest.substr(4);
  return layer_head + rest;
}

std::string expert_weight_name(const SourceConfig& source, int layer, int expert, int kind) {
  if (source.family == SourceFamily::deepseek_v41) return v41_expert_weight_name(layer, expert, kind);
  const std::string head = source.source_head + "layers." + std::to_string(layer) + ".";
  if (source.family != SourceFamily::kimi) {
    static constexpr const char* kDs[3] = {"gate_proj", "up_proj", "down_proj"};
    return head + "mlp.experts." + std::to_string(expert) + "." + kDs[kind] + ".weight";
  }
  static constexpr const char* kKimi[3] = {"w1", "w3", "w2"};
  return head + "block_sparse_moe.experts." + std::to_string(expert) + "." + kKimi[kind] + ".weight";
}

}  // namespace waste::convert

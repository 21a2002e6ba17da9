#include "compute/convert/glm_config.hpp"

#include <string>
#include <vector>

namespace waste::convert {
namespace {

using json = nlohmann::json;

bool names_glm(const json& o) {
  if (!o.is_object()) return false;
  if (auto mt = o.find("model_type"); mt != o.end() && mt->is_string()) {
    const auto t = mt->get<std::string>();
    if (t == "glm5_next" || t == "glm5_next_text") return true;
  }
  if (auto a = o.find("architectures"); a != o.end() && a->is_array() && !a->empty() && a->front().is_string()) {
    return a->front().get<std::string>().find("Glm5Next") != std::string::npos;
  }
  return false;
}

std::unexpected<Error> fail(const std::string& what) { return make_error(Errc::format, "config.json: " + what); }

// The 0-based attention kinds from layer_types: true = KDA.
Result<std::vector<bool>> kda_from_layer_types(const json& text, int n_layers) {
  auto lt = text.find("layer_types");
  if (lt == text.end() || lt->is_null()) {
    return fail("layer_types is missing (a GLM config's linear_attn_config.kda_layers is 0-based; the converter "
                "rebuilds the manifest's 1-based list from layer_types)");
  }
  if (!lt->is_array()) return fail("layer_types is not an array");
  if (int(lt->size()) < n_layers) {
    return fail("layer_types has " + std::to_string(lt->size()) + " entries for " + std::to_string(n_layers) +
                " layers");
  }
  std::vector<bool> kda;
  for (int l = 0; l < n_layers; ++l) {
    const json& v = (*lt)[std::size_t(l)];
    if (v == "linear_attention") kda.push_back(true);
    else if (v == "deepseek_sparse_attention" || v == "full_attention") kda.push_back(false);
    else {
      return fail("layer_types[" + std::to_string(l) + "] " + v.dump() +
                  " is not linear_attention, deepseek_sparse_attention or full_attention");
    }
  }
  return kda;
}

// first_k_dense_replace from mlp_layer_types: "dense" x k then "sparse" only.
Status first_dense_from_mlp_types(json& text, int n_layers) {
  auto mt = text.find("mlp_layer_types");
  if (mt == text.end() || mt->is_null()) return {};
  if (!mt->is_array() || int(mt->size()) < n_layers) {
    return fail("mlp_layer_types is not an array of " + std::to_string(n_layers) + " entries");
  }
  int k = 0;
  while (k < n_layers && (*mt)[std::size_t(k)] == "dense") ++k;
  for (int l = k; l < n_layers; ++l) {
    if ((*mt)[std::size_t(l)] != "sparse") {
      return fail("mlp_layer_types[" + std::to_string(l) + "] " + (*mt)[std::size_t(l)].dump() +
                  " after the dense prefix: only a run of dense layers followed by sparse ones is supported");
    }
  }
  if (auto f = text.find("first_k_dense_replace"); f != text.end() && !f->is_null() && *f != k) {
    return fail("first_k_dense_replace " + f->dump() + " contradicts mlp_layer_types (" + std::to_string(k) +
                " dense layers first)");
  }
  text["first_k_dense_replace"] = k;
  return {};
}

}  // namespace

bool is_glm_config(const json& outer, const json& text) { return names_glm(outer) || names_glm(text); }

Status normalize_glm_text_config(json& text, const json& outer) {
  for (const char* key : {"eos_token_id", "bos_token_id", "pad_token_id"}) {
    if (!text.contains(key) && outer.is_object() && outer.contains(key)) text[key] = outer[key];
  }
  auto nl = text.find("num_hidden_layers");
  if (nl == text.end() || !nl->is_number_integer() || nl->get<std::int64_t>() < 1 || nl->get<std::int64_t>() > 128) {
    return fail("num_hidden_layers must be an integer in 1..128");
  }
  const int n_layers = int(nl->get<std::int64_t>());
  auto kinds = kda_from_layer_types(text, n_layers);
  if (!kinds) return std::unexpected(kinds.error());
  WASTE_TRY(first_dense_from_mlp_types(text, n_layers));

  json lac = text.contains("linear_attn_config") && text["linear_attn_config"].is_object() ? text["linear_attn_config"]
                                                                                           : json::object();
  if (auto kl = lac.find("kda_layers"); kl != lac.end() && !kl->is_null()) {
    // The release's own list is 0-based: it must name exactly the layer_types KDA layers.
    std::vector<int> zero_based;
    for (int l = 0; l < n_layers; ++l) if ((*kinds)[std::size_t(l)]) zero_based.push_back(l);
    if (!kl->is_array() || *kl != json(zero_based)) {
      return fail("linear_attn_config.kda_layers " + kl->dump() + " (0-based) contradicts layer_types, whose " +
                  "linear_attention layers are " + json(zero_based).dump());
    }
  }
  json kda = json::array(), full = json::array();
  for (int l = 0; l < n_layers; ++l) ((*kinds)[std::size_t(l)] ? kda : full).push_back(l + 1);
  lac["kda_layers"] = kda;
  lac["full_attn_layers"] = full;
  auto copy_flat = [&](const char* lac_key, const char* flat_key, json fallback) {
    if (lac.contains(lac_key)) return;
    lac[lac_key] = text.contains(flat_key) && !text[flat_key].is_null() ? text[flat_key] : fallback;
  };
  copy_flat("num_heads", "linear_num_heads", 64);
  copy_flat("head_dim", "linear_head_dim", 128);
  copy_flat("short_conv_kernel_size", "linear_conv_kernel_dim", 4);
  if (!lac.contains("gate_lower_bound")) {
    // The release class: lower_bound, else linear_lower_bound, else -5.0; safe_gate forces -5.0
    // when the bound is null. A null bound means the softplus gate (no key in the manifest).
    json bound = -5.0;
    if (lac.contains("lower_bound")) bound = lac["lower_bound"];
    else if (text.contains("linear_lower_bound")) bound = text["linear_lower_bound"];
    if (bound.is_null() && lac.value("safe_gate", false)) bound = -5.0;
    if (!bound.is_null()) {
      if (!bound.is_number()) return fail("linear_attn_config.lower_bound " + bound.dump() + " is not a number");
      lac["gate_lower_bound"] = bound;
    }
  }
  text["linear_attn_config"] = lac;
  return {};
}

}  // namespace waste::convert

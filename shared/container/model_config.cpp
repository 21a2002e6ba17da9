#include "shared/container/model_config.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

namespace waste {
namespace {

using nlohmann::json;

// Reads keys of one JSON object with bounds, naming "<where>.<key>" in every error.
class ConfigReader {
 public:
  ConfigReader(const json& object, std::string where) : object_(object), where_(std::move(where)) {}

  Result<int> get_int(const char* key, int fallback, std::int64_t lo, std::int64_t hi) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return range_checked(key, fallback, lo, hi);
    if (!it->is_number_integer()) {
      return make_error(Errc::format, where_ + "." + key + ": expected an integer, found " +
                                          it->type_name());
    }
    if (it->is_number_unsigned() && it->get<std::uint64_t>() > std::uint64_t(hi)) {
      return make_error(Errc::format, where_ + "." + key + ": " + it->dump() + " is out of range " +
                                          std::to_string(lo) + ".." + std::to_string(hi));
    }
    return range_checked(key, it->get<std::int64_t>(), lo, hi);
  }

  Result<float> get_float(const char* key, float fallback) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return fallback;
    if (!it->is_number()) {
      return make_error(Errc::format, where_ + "." + key + ": expected a number, found " + it->type_name());
    }
    const double v = it->get<double>();
    if (!std::isfinite(v) || std::fabs(v) > 1e30) {
      return make_error(Errc::format, where_ + "." + key + ": " + it->dump() + " is not a finite number");
    }
    return static_cast<float>(v);
  }

  // The v0 engine presence-tests these keys; a compatible reader treats them as booleans.
  [[nodiscard]] bool get_flag(const char* key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return false;
    if (it->is_boolean()) return it->get<bool>();
    return true;
  }

  [[nodiscard]] const std::string& where() const { return where_; }

 private:
  Result<int> range_checked(const char* key, std::int64_t v, std::int64_t lo, std::int64_t hi) const {
    if (v < lo || v > hi) {
      return make_error(Errc::format, where_ + "." + key + ": " + std::to_string(v) + " is out of range " +
                                          std::to_string(lo) + ".." + std::to_string(hi));
    }
    return static_cast<int>(v);
  }

  const json& object_;
  std::string where_;
};

constexpr std::int64_t k2p16 = 1 << 16;
constexpr std::int64_t k2p20 = 1 << 20;
constexpr std::int64_t k2p24 = 1 << 24;

std::string arch_from(const json& outer_or_config) {
  auto first_of = [](const json& o) -> std::string {
    auto it = o.find("architectures");
    if (it != o.end() && it->is_array() && !it->empty() && it->front().is_string()) {
      return it->front().get<std::string>();
    }
    return {};
  };
  std::string raw;
  auto outer = outer_or_config.find("_outer");
  if (outer != outer_or_config.end() && outer->is_object()) raw = first_of(*outer);
  if (raw.empty()) raw = first_of(outer_or_config);
  if (raw.find("KimiK3") != std::string::npos) return "kimi-k3";
  if (raw.find("KimiLinear") != std::string::npos) return "kimi-linear";
  if (raw.find("Glm5Next") != std::string::npos) return "glm5-next";
  if (raw.find("DeepseekV41") != std::string::npos) return "deepseek-v4.1";
  return raw;
}

// DeepSeek-V3 / R1 / Kimi-K2 configs (converted by compute/convert): rotary unless mla_use_nope.
bool is_deepseek_family(const json& outer, const json& text) {
  for (const json* o : {&outer, &text}) {
    auto a = o->find("architectures");
    if (a != o->end() && a->is_array() && !a->empty() && a->front().is_string() &&
        a->front().get<std::string>().find("Deepseek") != std::string::npos) {
      return true;
    }
    auto mt = o->find("model_type");
    if (mt != o->end() && mt->is_string()) {
      const std::string t = mt->get<std::string>();
      if (t == "deepseek_v3" || t == "deepseek_v2" || t == "kimi_k2" || t == "deepseek_v41" ||
          t == "deepseek_v41_text") {
        return true;
      }
    }
  }
  return false;
}

// One of two synonymous keys (DeepSeek's and Kimi's name): both given and different is refused.
Result<const json*> synonym(const json& text, const std::string& where, const char* a, const char* b) {
  auto ia = text.find(a), ib = text.find(b);
  const json* va = ia != text.end() && !ia->is_null() ? &*ia : nullptr;
  const json* vb = ib != text.end() && !ib->is_null() ? &*ib : nullptr;
  if (va && vb && *va != *vb) {
    return make_error(Errc::format, where + ": " + a + " " + va->dump() + " and " + b + " " + vb->dump() +
                                        " contradict each other");
  }
  return va ? va : vb;
}

// scoring_func, n_group / topk_group, topk_method (docs/design/deepseek.md, "Routing").
Status parse_routing(const json& text, const std::string& where, ModelConfig& c) {
  auto scoring = synonym(text, where, "scoring_func", "moe_router_activation_func");
  if (!scoring) return std::unexpected(scoring.error());
  // score_func: the public engine's manifest name for the same key.
  auto alt = synonym(text, where, "scoring_func", "score_func");
  if (!alt) return std::unexpected(alt.error());
  if (*scoring && *alt && **scoring != **alt) {
    return make_error(Errc::format, where + ": moe_router_activation_func " + (*scoring)->dump() + " and score_func " +
                                        (*alt)->dump() + " contradict each other");
  }
  if (*scoring || *alt) {
    const json& v = *scoring ? **scoring : **alt;
    const char* key = *scoring ? "scoring_func" : "score_func";
    if (v == "sigmoid") c.scoring = RouterScoring::sigmoid;
    else if (v == "softmax") c.scoring = RouterScoring::softmax;
    else if (v == "sqrtsoftplus") c.scoring = RouterScoring::sqrtsoftplus;
    else {
      return make_error(Errc::format, where + "." + key + ": " + v.dump() + " is not sigmoid, softmax or sqrtsoftplus");
    }
  }
  auto groups = synonym(text, where, "n_group", "num_expert_group");
  if (!groups) return std::unexpected(groups.error());
  auto int_of = [&](const json* v, const char* key, int fallback, int lo, int hi) -> Result<int> {
    if (v == nullptr) return fallback;
    if (!v->is_number_integer() || v->get<std::int64_t>() < lo || v->get<std::int64_t>() > hi) {
      return make_error(Errc::format, where + "." + key + ": " + v->dump() + " is not an integer in " +
                                          std::to_string(lo) + ".." + std::to_string(hi));
    }
    return int(v->get<std::int64_t>());
  };
  WASTE_ASSIGN(c.n_group, int_of(*groups, "n_group", 1, 1, kMaxExpertGroups));
  auto tg = text.find("topk_group");
  WASTE_ASSIGN(c.topk_group, int_of(tg != text.end() && !tg->is_null() ? &*tg : nullptr, "topk_group", c.n_group,
                                    1, c.n_group));
  std::string method = "noaux_tc";
  if (auto m = text.find("topk_method"); m != text.end() && !m->is_null()) {
    if (!m->is_string()) return make_error(Errc::format, where + ".topk_method: expected a string");
    method = m->get<std::string>();
    if (method != "noaux_tc" && method != "greedy" && method != "group_limited_greedy") {
      return make_error(Errc::format, where + ".topk_method: \"" + method +
                                          "\" is not noaux_tc, group_limited_greedy or greedy");
    }
  }
  // Plain greedy top-k (DeepSeek-V2-Lite) and use_grouped_topk false ignore the groups.
  auto ugt = text.find("use_grouped_topk");
  if (method == "greedy" || (ugt != text.end() && ugt->is_boolean() && !ugt->get<bool>())) {
    c.n_group = c.topk_group = 1;
  }
  if (c.n_experts > 0 && c.n_group > 1) {
    const int per = c.n_experts / c.n_group;
    if (c.n_experts % c.n_group != 0 || per < 2) {
      return make_error(Errc::format, where + ".n_group: " + std::to_string(c.n_group) + " does not split " +
                                          std::to_string(c.n_experts) + " experts into groups of at least 2");
    }
    if (c.top_k > c.topk_group * per) {
      return make_error(Errc::format, where + ".topk_group: " + std::to_string(c.topk_group) + " groups of " +
                                          std::to_string(per) + " experts hold fewer than num_experts_per_token " +
                                          std::to_string(c.top_k));
    }
  }
  return ok();
}

// GLM-5.3-Flash's keys (mHC, clamped SwiGLU, the DSA indexer's shape), under their HF names.
Status parse_glm_keys(const json& text, const ConfigReader& r, ModelConfig& c) {
  const std::string& where = r.where();
  WASTE_ASSIGN(c.hc_mult, r.get_int("hc_mult", 0, 0, 16));
  WASTE_ASSIGN(c.hc_sinkhorn_iters, r.get_int("hc_sinkhorn_iters", 20, 1, 1000));
  WASTE_ASSIGN(c.hc_eps, r.get_float("hc_eps", 1e-6f));
  if (!(c.hc_eps >= 0.0f && c.hc_eps < 1.0f)) {
    return make_error(Errc::format, where + ".hc_eps: " + std::to_string(c.hc_eps) + " is not in [0, 1)");
  }
  WASTE_ASSIGN(c.swiglu_limit, r.get_float("swiglu_limit", 0.0f));
  if (!(c.swiglu_limit >= 0.0f && c.swiglu_limit <= 1e6f)) {
    return make_error(Errc::format, where + ".swiglu_limit: " + std::to_string(c.swiglu_limit) +
                                        " is not in [0, 1e6] (0 = no clamp)");
  }
  WASTE_ASSIGN(c.index_topk, r.get_int("index_topk", 0, 0, k2p24));
  WASTE_ASSIGN(c.index_kpool, r.get_int("index_kpool", 0, 0, 4096));
  WASTE_ASSIGN(c.index_n_heads, r.get_int("index_n_heads", 0, 0, 4096));
  WASTE_ASSIGN(c.index_head_dim, r.get_int("index_head_dim", 0, 0, k2p16));
  if (auto it = text.find("index_kpool_always_select_tail"); it != text.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return make_error(Errc::format, where + ".index_kpool_always_select_tail: expected a boolean, found " +
                                          std::string(it->type_name()));
    }
    c.index_kpool_always_select_tail = it->get<bool>();
  }
  return ok();
}

// A per-layer list of strings (layer_types, mlp_layer_types): an array of n_layers strings.
Result<const json*> layer_list(const json& text, const std::string& where, const char* key, int n_layers) {
  auto it = text.find(key);
  if (it == text.end() || it->is_null()) return nullptr;
  if (!it->is_array() || int(it->size()) != n_layers) {
    return make_error(Errc::format, where + "." + key + ": expected an array of num_hidden_layers (" +
                                        std::to_string(n_layers) + ") strings");
  }
  for (const auto& v : *it) {
    if (!v.is_string()) return make_error(Errc::format, where + "." + key + ": entry " + v.dump() + " is not a string");
  }
  return &*it;
}

// layer_types decides KDA / MLA per layer (GLM). A kda_layers list beside it must name the
// same layers, read 1-based (the v0 rule, what a rebuilt container stores) or 0-based (GLM's
// own config.json); anything else contradicts it.
Status parse_layer_types(const json& text, const std::string& where, const std::vector<int>& kda_layers,
                         ModelConfig& c) {
  auto list = layer_list(text, where, "layer_types", c.n_layers);
  if (!list) return std::unexpected(list.error());
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string t = (**list)[std::size_t(l)].get<std::string>();
    if (t == "linear_attention") {
      c.attention[std::size_t(l)] = LayerAttention::kda;
    } else if (t != "full_attention" && t != "deepseek_sparse_attention") {
      return make_error(Errc::format, where + ".layer_types: entry " + std::to_string(l) + " \"" + t +
                                          "\" is not linear_attention, full_attention or deepseek_sparse_attention");
    }
  }
  if (kda_layers.empty()) return ok();
  auto matches = [&](int base) {
    std::vector<bool> kda(std::size_t(c.n_layers), false);
    for (int v : kda_layers) {
      const int l = v - base;
      if (l < 0 || l >= c.n_layers) return false;
      kda[std::size_t(l)] = true;
    }
    for (int l = 0; l < c.n_layers; ++l) {
      if (kda[std::size_t(l)] != c.is_kda(l)) return false;
    }
    return true;
  };
  if (!matches(1) && !matches(0)) {
    return make_error(Errc::format, where + ".linear_attn_config.kda_layers: contradicts layer_types (neither "
                                            "1-based nor 0-based it names the linear_attention layers)");
  }
  return ok();
}

// mlp_layer_types ("dense" / "sparse" per layer, GLM): the dense layers must come first; their
// count is first_k_dense_replace (which, when also given, must agree).
Status parse_mlp_layer_types(const json& text, const std::string& where, ModelConfig& c) {
  auto list = layer_list(text, where, "mlp_layer_types", c.n_layers);
  if (!list) return std::unexpected(list.error());
  if (*list == nullptr) return ok();
  int dense = 0;
  bool sparse_seen = false;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string t = (**list)[std::size_t(l)].get<std::string>();
    if (t != "dense" && t != "sparse") {
      return make_error(Errc::format, where + ".mlp_layer_types: entry " + std::to_string(l) + " \"" + t +
                                          "\" is not dense or sparse");
    }
    if (t == "dense" && sparse_seen) {
      return make_error(Errc::format, where + ".mlp_layer_types: dense layer " + std::to_string(l) +
                                          " after a sparse one (dense layers must come first)");
    }
    sparse_seen = sparse_seen || t == "sparse";
    dense += t == "dense" ? 1 : 0;
  }
  if (text.contains("first_k_dense_replace") && !text["first_k_dense_replace"].is_null() && c.first_dense != dense) {
    return make_error(Errc::format, where + ": first_k_dense_replace " + std::to_string(c.first_dense) +
                                        " and mlp_layer_types (" + std::to_string(dense) +
                                        " dense layers first) contradict each other");
  }
  c.first_dense = dense;
  return ok();
}

// A list of integers under `key` (absent or null: empty), each in lo..hi; `sorted`: strictly
// ascending. Errors name the key and the entry.
template <class T>
Result<std::vector<T>> int_list(const json& text, const std::string& where, const char* key, std::int64_t lo,
                                std::int64_t hi, bool sorted) {
  std::vector<T> out;
  auto it = text.find(key);
  if (it == text.end() || it->is_null()) return out;
  const std::string w = where + "." + key;
  if (!it->is_array()) return make_error(Errc::format, w + ": expected an array, found " + it->type_name());
  if (it->size() > 4096) {
    return make_error(Errc::format, w + ": " + std::to_string(it->size()) + " entries (at most 4096)");
  }
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    const std::string e = w + "[" + std::to_string(i) + "]";
    if (!v.is_number_integer()) return make_error(Errc::format, e + ": expected an integer, found " + v.dump());
    if ((v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(hi)) || v.get<std::int64_t>() < lo ||
        v.get<std::int64_t>() > hi) {
      return make_error(Errc::format, e + ": " + v.dump() + " is out of range " + std::to_string(lo) + ".." +
                                          std::to_string(hi));
    }
    const auto x = static_cast<T>(v.get<std::int64_t>());
    if (sorted && !out.empty() && x <= out.back()) {
      return make_error(Errc::format, e + ": " + v.dump() + " is not above the entry before it (the list must be "
                                          "sorted, without repeats)");
    }
    out.push_back(x);
  }
  return out;
}

std::string ids_text(const std::vector<int>& ids) {
  std::string t = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) t += (i ? ", " : "") + std::to_string(ids[i]);
  return t + "]";
}

// DeepSeek-V4.1-Flash's keys (CSA2 attention, single-pass mHC, Engram), read for every config
// (absent = empty / 0) and cross-checked as the public engine's cfg_sane does.
Status parse_v41_keys(const json& text, const ConfigReader& r, ModelConfig& c) {
  const std::string& where = r.where();
  auto fail = [&](const std::string& what) { return make_error(Errc::format, where + "." + what); };
  WASTE_ASSIGN(c.head_dim, r.get_int("head_dim", 0, 0, k2p16));
  WASTE_ASSIGN(c.o_groups, r.get_int("o_groups", 0, 0, 4096));
  WASTE_ASSIGN(c.o_lora_rank, r.get_int("o_lora_rank", 0, 0, k2p20));
  WASTE_ASSIGN(c.sliding_window, r.get_int("sliding_window", 0, 0, k2p24));
  WASTE_ASSIGN(c.candidate_topk_blocks, r.get_int("candidate_topk_blocks", 0, 0, k2p24));
  WASTE_ASSIGN(c.candidate_block_size, r.get_int("candidate_block_size", 0, 0, k2p16));
  WASTE_ASSIGN(c.gate_temp, r.get_float("gate_temp", 1.0f));
  if (!(c.gate_temp > 0.0f)) return fail("gate_temp: " + std::to_string(c.gate_temp) + " is not above 0");
  {
    auto it = text.find("compress_rope_theta");
    if (it != text.end() && !it->is_null()) {
      if (!it->is_number() || !std::isfinite(it->get<double>()) || !(it->get<double>() > 1.0) ||
          it->get<double>() > 1e30) {
        return fail("compress_rope_theta: " + it->dump() + " is not a number above 1");
      }
      c.compress_rope_theta = it->get<double>();
    }
  }
  c.attn_sink = r.get_flag("attn_sink");
  c.hc_single_pass = r.get_flag("hc_single_pass");

  // compress_ratios: one per backbone layer, optionally followed by the DSpark layers' zeros.
  WASTE_ASSIGN(c.compress_ratios, int_list<int>(text, where, "compress_ratios", 0, 1024, false));
  if (!c.compress_ratios.empty()) {
    const std::size_t n = std::size_t(c.n_layers), most = n + std::size_t(c.n_mtp);
    if (c.compress_ratios.size() < n || c.compress_ratios.size() > most) {
      return fail("compress_ratios: " + std::to_string(c.compress_ratios.size()) + " entries for " +
                  std::to_string(n) + " layers (and " + std::to_string(c.n_mtp) + " draft layers)");
    }
    for (std::size_t i = n; i < c.compress_ratios.size(); ++i) {
      if (c.compress_ratios[i] != 0) {
        return fail("compress_ratios[" + std::to_string(i) + "]: " + std::to_string(c.compress_ratios[i]) +
                    " for a draft layer (draft layers are window-only: 0)");
      }
    }
    c.compress_ratios.resize(n);
  }
  const int last = c.n_layers - 1;
  WASTE_ASSIGN(c.kv_source_layer_ids, int_list<int>(text, where, "kv_source_layer_ids", 0, last, true));
  WASTE_ASSIGN(c.index_source_layer_ids, int_list<int>(text, where, "index_source_layer_ids", 0, last, true));
  auto ratio = [&](int l) { return c.compress_ratios.empty() ? 0 : c.compress_ratios[std::size_t(l)]; };
  for (std::size_t i = 0; i < c.kv_source_layer_ids.size(); ++i) {
    const int l = c.kv_source_layer_ids[i];
    if (ratio(l) == 0) {
      return fail("kv_source_layer_ids[" + std::to_string(i) + "]: layer " + std::to_string(l) +
                  " has compress ratio 0 (a kv source must compress)");
    }
  }
  for (int l = 0; l < c.n_layers; ++l) {
    if (ratio(l) == 0) continue;
    const int src = c.kv_source_of(l);
    if (src < 0) {
      return fail("compress_ratios[" + std::to_string(l) + "]: layer " + std::to_string(l) + " compresses (ratio " +
                  std::to_string(ratio(l)) + ") but no kv_source_layer_ids entry is at or before it");
    }
    if (ratio(l) != ratio(src)) {
      return fail("compress_ratios[" + std::to_string(l) + "]: layer " + std::to_string(l) + " has ratio " +
                  std::to_string(ratio(l)) + " but its kv source, layer " + std::to_string(src) + ", has ratio " +
                  std::to_string(ratio(src)));
    }
  }
  for (std::size_t i = 0; i < c.index_source_layer_ids.size(); ++i) {
    const int l = c.index_source_layer_ids[i];
    if (ratio(l) == 0) {
      return fail("index_source_layer_ids[" + std::to_string(i) + "]: layer " + std::to_string(l) +
                  " has compress ratio 0 (an index source scores compressed positions)");
    }
  }
  {
    auto it = text.find("candidate_source_layer_id");
    if (it == text.end() || it->is_null()) {
      // The reference's default: the last kv source, when there is an indexer at all.
      c.candidate_source_layer_id = c.kv_source_layer_ids.empty() || c.index_source_layer_ids.empty()
                                        ? -1
                                        : c.kv_source_layer_ids.back();
    } else {
      WASTE_ASSIGN(c.candidate_source_layer_id, r.get_int("candidate_source_layer_id", -1, -1024, last));
      if (c.candidate_source_layer_id < 0) c.candidate_source_layer_id = -1;
    }
    if (c.candidate_source_layer_id >= 0) {
      const auto& ix = c.index_source_layer_ids;
      if (std::find(ix.begin(), ix.end(), c.candidate_source_layer_id) == ix.end()) {
        return fail("candidate_source_layer_id: layer " + std::to_string(c.candidate_source_layer_id) +
                    " is not among index_source_layer_ids " + ids_text(ix));
      }
      if (c.candidate_topk_blocks < 1 || c.candidate_block_size < 1) {
        return fail("candidate_source_layer_id: the two-level top-k needs candidate_topk_blocks and "
                    "candidate_block_size >= 1");
      }
    }
  }

  // Engram.
  WASTE_ASSIGN(c.engram_layer_ids, int_list<int>(text, where, "engram_layer_ids", 0, last, true));
  WASTE_ASSIGN(c.engram_num_embeddings,
               int_list<std::int64_t>(text, where, "engram_num_embeddings", 1, std::int64_t(1) << 40, false));
  {
    auto vs = text.find("engram_vocab_size");
    if (vs != text.end() && !vs->is_null()) {
      constexpr std::int64_t kTop = std::int64_t(1) << 40;
      if (!vs->is_number_integer() || vs->get<std::int64_t>() < 2 || vs->get<std::int64_t>() > kTop) {
        return fail("engram_vocab_size: " + vs->dump() + " is not an integer in 2.." + std::to_string(kTop));
      }
      c.engram_vocab_size = vs->get<std::int64_t>();
    }
  }
  WASTE_ASSIGN(c.engram_max_ngram_size, r.get_int("engram_max_ngram_size", 0, 0, 16));
  WASTE_ASSIGN(c.engram_n_heads, r.get_int("engram_n_heads", 0, 0, 1024));
  WASTE_ASSIGN(c.engram_head_dim, r.get_int("engram_head_dim", 0, 0, k2p16));
  WASTE_ASSIGN(c.engram_pad_id, r.get_int("engram_pad_id", 0, 0, k2p24));
  WASTE_ASSIGN(c.engram_compressed_vocab_size, r.get_int("engram_compressed_vocab_size", 0, 0, k2p24));
  if (!c.engram_layer_ids.empty()) {
    if (c.engram_num_embeddings.size() != c.engram_layer_ids.size()) {
      return fail("engram_num_embeddings: " + std::to_string(c.engram_num_embeddings.size()) + " entries for " +
                  std::to_string(c.engram_layer_ids.size()) + " engram_layer_ids");
    }
    if (c.engram_max_ngram_size < 2) return fail("engram_max_ngram_size: engram layers need n-grams of 2 or more");
    if (c.engram_n_heads < 1) return fail("engram_n_heads: engram layers need at least 1 head");
    if (c.engram_head_dim < 32 || c.engram_head_dim % 32 != 0) {
      return fail("engram_head_dim: " + std::to_string(c.engram_head_dim) +
                  " is not a positive multiple of 32 (one scale per 32 columns)");
    }
    if (c.engram_vocab_size < 2) return fail("engram_vocab_size: engram layers need it (the primes start there)");
    if (c.engram_compressed_vocab_size < 1 || c.engram_compressed_vocab_size > c.vocab) {
      return fail("engram_compressed_vocab_size: " + std::to_string(c.engram_compressed_vocab_size) +
                  " is not in 1..vocab_size " + std::to_string(c.vocab));
    }
    if (c.engram_pad_id >= c.vocab) {
      return fail("engram_pad_id: " + std::to_string(c.engram_pad_id) + " is not a token id below vocab_size " +
                  std::to_string(c.vocab));
    }
  } else if (!c.engram_num_embeddings.empty()) {
    return fail("engram_num_embeddings: given without engram_layer_ids");
  }
  return ok();
}

// The layer kinds of a deepseek-v4.1 config: every layer CSA; its layer_types, when written
// (transformers' to_dict), must name exactly the kv sources "shared_compressed_attention".
Status v41_layers(const json& text, const std::string& where, ModelConfig& c) {
  c.attention.assign(std::size_t(c.n_layers), LayerAttention::csa);
  auto lt = text.find("layer_types");
  if (lt == text.end() || lt->is_null()) return ok();
  if (!lt->is_array() || lt->size() != std::size_t(c.n_layers)) {
    return make_error(Errc::format, where + ".layer_types: expected an array of " + std::to_string(c.n_layers) +
                                        " entries");
  }
  const auto& src = c.kv_source_layer_ids;
  for (int l = 0; l < c.n_layers; ++l) {
    const bool is_src = std::find(src.begin(), src.end(), l) != src.end();
    const char* want = is_src ? "shared_compressed_attention" : "sliding_attention";
    if ((*lt)[std::size_t(l)] != want) {
      return make_error(Errc::format, where + ".layer_types[" + std::to_string(l) + "]: " +
                                          (*lt)[std::size_t(l)].dump() + " where kv_source_layer_ids " +
                                          ids_text(src) + " make it \"" + want + "\"");
    }
  }
  return ok();
}

}  // namespace

Result<ModelConfig> ModelConfig::from_json(const json& config_in) {
  if (!config_in.is_object()) return make_error(Errc::format, "config: expected an object");
  const json* text = &config_in;
  std::string where = "config";
  auto nested = config_in.find("text_config");
  if (nested != config_in.end() && nested->is_object()) {
    text = &*nested;
    where = "config.text_config";
  }
  const ConfigReader r(*text, where);
  ModelConfig c;
  c.arch = arch_from(config_in);
  if (c.arch.empty()) c.arch = arch_from(*text);
  if (c.arch.empty()) {
    auto mt = text->find("model_type");
    if (mt != text->end() && mt->is_string()) c.arch = mt->get<std::string>();
    if (c.arch == "glm5_next" || c.arch == "glm5_next_text") c.arch = "glm5-next";
    if (c.arch == "deepseek_v41" || c.arch == "deepseek_v41_text") c.arch = "deepseek-v4.1";
  }

  WASTE_ASSIGN(c.n_layers, r.get_int("num_hidden_layers", 0, 1, 128));
  WASTE_ASSIGN(c.hidden, r.get_int("hidden_size", 0, 1, k2p20));
  WASTE_ASSIGN(c.vocab, r.get_int("vocab_size", 0, 1, k2p24));
  WASTE_ASSIGN(c.n_heads, r.get_int("num_attention_heads", 0, 1, k2p16));
  WASTE_ASSIGN(c.n_experts, r.get_int("num_experts", 0, 0, std::numeric_limits<std::int32_t>::max()));
  if (c.n_experts > kMaxExperts) {
    return make_error(Errc::format, where + ".num_experts " + std::to_string(c.n_experts) + " exceeds the limit " +
                                        std::to_string(kMaxExperts) + " (expert ids are 16-bit in the cache key)");
  }
  WASTE_ASSIGN(c.top_k, r.get_int("num_experts_per_token", 0, 0, std::min(c.n_experts, 64)));
  WASTE_ASSIGN(c.moe_inter, r.get_int("moe_intermediate_size", 0, 0, k2p20));
  WASTE_ASSIGN(c.dense_inter, r.get_int("intermediate_size", 0, 0, k2p20));
  WASTE_ASSIGN(c.n_shared, r.get_int("num_shared_experts", 0, 0, 64));
  WASTE_ASSIGN(c.first_dense, r.get_int("first_k_dense_replace", 0, 0, c.n_layers));
  WASTE_ASSIGN(c.kv_lora, r.get_int("kv_lora_rank", 0, 0, k2p20));
  WASTE_ASSIGN(c.q_lora, r.get_int("q_lora_rank", 0, 0, k2p20));
  WASTE_ASSIGN(c.qk_nope, r.get_int("qk_nope_head_dim", 0, 0, k2p20));
  WASTE_ASSIGN(c.qk_rope, r.get_int("qk_rope_head_dim", 0, 0, k2p20));
  WASTE_ASSIGN(c.v_head, r.get_int("v_head_dim", 0, 0, k2p20));
  WASTE_ASSIGN(c.latent_dim, r.get_int("routed_expert_hidden_size", 0, 0, k2p20));
  WASTE_ASSIGN(c.attn_res_block, r.get_int("attn_res_block_size", 0, 0, c.n_layers));
  WASTE_ASSIGN(c.rms_eps, r.get_float("rms_norm_eps", 1e-5f));
  if (!(c.rms_eps > 0.0f && c.rms_eps < 1.0f)) {
    return make_error(Errc::format, where + ".rms_norm_eps: " + std::to_string(c.rms_eps) + " is not in (0, 1)");
  }
  WASTE_ASSIGN(c.routed_scale, r.get_float("routed_scaling_factor", 1.0f));
  WASTE_ASSIGN(c.situ_beta, r.get_float("activation_situ_beta", 1.0f));
  WASTE_ASSIGN(c.situ_linear_beta, r.get_float("activation_situ_linear_beta", 0.0f));
  WASTE_TRY(parse_routing(*text, where, c));
  WASTE_ASSIGN(c.n_mtp, r.get_int("num_nextn_predict_layers", 0, 0, 16));
  WASTE_TRY(parse_glm_keys(*text, r, c));
  WASTE_TRY(parse_v41_keys(*text, r, c));
  c.renormalize = r.get_flag("moe_renormalize");
  c.latent_norm = r.get_flag("latent_moe_use_norm");
  c.mla_output_gate = r.get_flag("mla_use_output_gate");
  {
    auto act = text->find("hidden_act");
    c.act_situ = act != text->end() && act->is_string() && act->get<std::string>() == "situ";
  }
  {
    // eos_token_id is an int or a list of ids (GLM: end of text and two turn markers): the first is
    // the primary eos, all of them stop generation.
    auto eos = text->find("eos_token_id");
    if (eos != text->end() && eos->is_number_integer()) {
      WASTE_ASSIGN(c.eos_token_id, r.get_int("eos_token_id", 0, 0, k2p24));
      if (c.eos_token_id > 0) c.eos_token_ids.push_back(c.eos_token_id);
    } else if (eos != text->end() && eos->is_array()) {
      if (eos->empty() || eos->size() > 64) {
        return make_error(Errc::format, where + ".eos_token_id: a list must hold 1..64 token ids, found " +
                                            std::to_string(eos->size()));
      }
      for (const auto& v : *eos) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > k2p24) {
          return make_error(Errc::format, where + ".eos_token_id: entry " + v.dump() + " is not a token id 0.." +
                                              std::to_string(k2p24));
        }
        c.eos_token_ids.push_back(v.get<int>());
      }
      c.eos_token_id = c.eos_token_ids.front();
    }
    auto bos = text->find("bos_token_id");
    if (bos != text->end() && bos->is_number_integer()) WASTE_ASSIGN(c.bos_token_id, r.get_int("bos_token_id", -1, 0, k2p24));
  }

  std::vector<int> kda_layers;
  const bool has_layer_types = text->contains("layer_types") && !(*text)["layer_types"].is_null();
  auto lac = text->find("linear_attn_config");
  if (lac != text->end() && !lac->is_null()) {
    if (!lac->is_object()) return make_error(Errc::format, where + ".linear_attn_config: expected an object");
    const ConfigReader lr(*lac, where + ".linear_attn_config");
    WASTE_ASSIGN(c.kda_heads, lr.get_int("num_heads", 0, 0, k2p16));
    WASTE_ASSIGN(c.kda_dim, lr.get_int("head_dim", 0, 0, k2p16));
    WASTE_ASSIGN(c.conv_k, lr.get_int("short_conv_kernel_size", 4, 0, 64));
    WASTE_ASSIGN(c.gate_lower_bound, lr.get_float("gate_lower_bound", 0.0f));
    c.full_rank_gate = lr.get_flag("use_full_rank_gate");
    // GLM's linear_attn_config names the bounded gate lower_bound (safe_gate: -5 when unset).
    if (c.gate_lower_bound == 0.0f) WASTE_ASSIGN(c.gate_lower_bound, lr.get_float("lower_bound", 0.0f));
    if (c.gate_lower_bound == 0.0f && lr.get_flag("safe_gate")) c.gate_lower_bound = -5.0f;
    if (c.gate_lower_bound > 0.0f) {
      return make_error(Errc::format, lr.where() + ".gate_lower_bound: " + std::to_string(c.gate_lower_bound) +
                                          " is positive (a lower bound on the log-decay is <= 0)");
    }
    auto kl = lac->find("kda_layers");
    if (kl != lac->end() && !kl->is_null()) {
      if (!kl->is_array()) return make_error(Errc::format, lr.where() + ".kda_layers: expected an array");
      // With layer_types the list may be GLM's 0-based one (checked against layer_types below).
      const int lowest = has_layer_types ? 0 : 1;
      for (const auto& v : *kl) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < lowest || v.get<std::int64_t>() > c.n_layers) {
          return make_error(Errc::format, lr.where() + ".kda_layers: entry " + v.dump() + " is not a layer number " +
                                              std::to_string(lowest) + ".." + std::to_string(c.n_layers));
        }
        kda_layers.push_back(v.get<int>());
      }
    }
  }
  if (c.is_deepseek_v41()) {
    // V4.1's YaRN (compressed layers only) has no mscale at all (transformers: attention_factor
    // 1): written as mscale = mscale_all_dim = 0, which the rope reader takes for exactly that.
    auto rs = text->find("rope_scaling");
    if (rs != text->end() && rs->is_object() && !rs->contains("mscale") && !rs->contains("mscale_all_dim")) {
      json patched = *text;
      patched["rope_scaling"]["mscale"] = 0.0;
      patched["rope_scaling"]["mscale_all_dim"] = 0.0;
      WASTE_ASSIGN(c.rope, parse_rope_config(patched, where, true, c.qk_rope));
    } else {
      WASTE_ASSIGN(c.rope, parse_rope_config(*text, where, true, c.qk_rope));
    }
  } else {
    WASTE_ASSIGN(c.rope, parse_rope_config(*text, where, is_deepseek_family(config_in, *text), c.qk_rope));
  }
  c.attention.assign(c.n_layers, LayerAttention::mla);
  if (c.is_deepseek_v41()) {
    WASTE_TRY(v41_layers(*text, where, c));
  } else if (has_layer_types) {
    WASTE_TRY(parse_layer_types(*text, where, kda_layers, c));
  } else {
    for (int l1 : kda_layers) c.attention[l1 - 1] = LayerAttention::kda;
  }
  WASTE_TRY(parse_mlp_layer_types(*text, where, c));

  // Bounds that depend on which layer kinds exist (cfg_sane).
  auto need = [&](bool ok, const std::string& what) -> Status {
    if (!ok) return make_error(Errc::format, where + ": " + what);
    return {};
  };
  if (c.n_kda_layers() > 0) {
    WASTE_TRY(need(c.kda_heads >= 1 && c.kda_dim >= 1 && c.conv_k >= 1,
                   "KDA layers need linear_attn_config.num_heads, head_dim and short_conv_kernel_size >= 1"));
  }
  if (c.n_mla_layers() > 0) {
    WASTE_TRY(need(c.kv_lora >= 1, "MLA layers need kv_lora_rank >= 1"));
    WASTE_TRY(need(c.qk_nope + c.qk_rope >= 1, "MLA layers need qk_nope_head_dim + qk_rope_head_dim >= 1"));
    WASTE_TRY(need(c.v_head >= 1, "MLA layers need v_head_dim >= 1"));
  }
  if (c.uses_mhc()) {
    WASTE_TRY(need(c.attn_res_block == 0, "hc_mult (mHC) and attn_res_block_size (Attention Residuals) exclude "
                                          "each other"));
    // One token's post and comb coefficients ride in a hidden-sized per-token buffer.
    WASTE_TRY(need(c.hc_mult + c.hc_mult * c.hc_mult <= c.hidden,
                   "hc_mult " + std::to_string(c.hc_mult) + " needs hidden_size >= hc_mult * (hc_mult + 1)"));
  }
  if (c.swiglu_limit > 0.0f) {
    WASTE_TRY(need(!c.act_situ, "swiglu_limit clamps SiLU gates; hidden_act situ has none"));
  }
  if (c.n_csa_layers() > 0) {
    if (!c.attn_sink) {
      return make_error(Errc::format, where + ".attn_sink: missing (DeepSeek-V4.1 attention adds a per-head sink to "
                                              "every softmax; the converter sets it from the checkpoint's attn_sink)");
    }
    WASTE_TRY(need(c.head_dim >= 1, "DeepSeek-V4.1 attention needs head_dim >= 1"));
    WASTE_TRY(need(c.qk_rope <= c.head_dim, "qk_rope_head_dim " + std::to_string(c.qk_rope) + " exceeds head_dim " +
                                                std::to_string(c.head_dim)));
    WASTE_TRY(need(c.q_lora >= 1, "DeepSeek-V4.1 attention needs q_lora_rank >= 1"));
    WASTE_TRY(need(c.o_groups >= 1 && c.n_heads % c.o_groups == 0,
                   "o_groups " + std::to_string(c.o_groups) + " does not divide num_attention_heads " +
                       std::to_string(c.n_heads)));
    WASTE_TRY(need(c.o_lora_rank >= 1, "DeepSeek-V4.1 attention needs o_lora_rank >= 1"));
    WASTE_TRY(need(c.sliding_window >= 1, "DeepSeek-V4.1 attention needs sliding_window >= 1"));
    WASTE_TRY(need(!c.compress_ratios.empty(), "DeepSeek-V4.1 attention needs compress_ratios (one per layer)"));
    if (!c.index_source_layer_ids.empty()) {
      WASTE_TRY(need(c.index_n_heads >= 1 && c.index_head_dim >= 1 && c.index_topk >= 1,
                     "index_source_layer_ids needs index_n_heads, index_head_dim and index_topk >= 1"));
      for (int l : c.index_source_layer_ids) {
        WASTE_TRY(need(c.kv_source_of(l) >= 0, "index source layer " + std::to_string(l) +
                                                  " has no kv_source_layer_ids entry at or before it"));
      }
    }
    WASTE_TRY(need(c.compress_rope_theta > 0.0 || c.kv_source_layer_ids.empty(),
                   "compressing layers need compress_rope_theta"));
  }
  if (c.hc_single_pass) WASTE_TRY(need(c.uses_mhc(), "hc_single_pass needs hc_mult >= 1"));
  if (c.has_indexer() && !c.is_deepseek_v41()) {
    WASTE_TRY(need(c.index_head_dim >= 1 && c.index_kpool >= 1 && c.index_topk >= 1,
                   "index_n_heads > 0 needs index_head_dim, index_kpool and index_topk >= 1"));
    WASTE_TRY(need(c.index_topk % c.index_kpool == 0, "index_topk " + std::to_string(c.index_topk) +
                                                          " is not a multiple of index_kpool " +
                                                          std::to_string(c.index_kpool)));
    WASTE_TRY(need(c.q_lora >= 1, "the DSA indexer (index_n_heads > 0) reads the q_lora residual: q_lora_rank >= 1"));
  }
  if (c.n_experts > 0) WASTE_TRY(need(c.moe_inter >= 1, "num_experts > 0 needs moe_intermediate_size >= 1"));
  if (c.n_experts > 0) WASTE_TRY(need(c.top_k >= 1, "num_experts > 0 needs num_experts_per_token >= 1"));
  if (c.n_experts == 0 || c.first_dense > 0) {
    WASTE_TRY(need(c.dense_inter >= 1, "dense layers need intermediate_size >= 1"));
  }
  // Every tensor size and per-token width the engine computes must fit in int32.
  const std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  const std::int64_t lat = c.expert_input_dim();
  const std::pair<std::int64_t, const char*> products[] = {
      {std::int64_t(c.vocab) * c.hidden, "vocab_size * hidden_size"},
      {std::int64_t(c.dense_inter) * c.hidden, "intermediate_size * hidden_size"},
      {std::int64_t(c.moe_inter) * lat, "moe_intermediate_size * expert input size"},
      {std::int64_t(c.shared_inter()) * c.hidden, "shared expert width * hidden_size"},
      {std::int64_t(c.n_experts) * c.hidden, "num_experts * hidden_size"},
      {std::int64_t(c.kda_heads) * c.kda_dim * std::max(c.hidden, c.conv_k), "KDA channels * hidden_size"},
      {std::int64_t(c.kda_heads) * c.kda_dim * c.kda_dim, "KDA heads * head_dim^2"},
      {std::int64_t(c.n_heads) * (c.qk_nope + c.qk_rope) * std::max(c.hidden, c.q_lora), "MLA query size * input"},
      {std::int64_t(c.n_heads) * (c.qk_nope + c.v_head) * c.kv_lora, "kv_b_proj size"},
      {std::int64_t(c.n_heads) * c.v_head * c.hidden, "o_proj size"},
      {std::int64_t(c.kv_lora + c.qk_rope) * c.hidden, "kv_a_proj size"},
      {std::int64_t(c.q_lora) * c.hidden, "q_a_proj size"},
      {std::int64_t(c.hc_mix()) * c.stream_width(), "mHC projection size"},
      {std::int64_t(c.index_n_heads) * c.index_head_dim * std::max(c.q_lora, c.hidden), "indexer query size"},
      {std::int64_t(c.n_heads) * c.head_dim * std::max(c.q_lora, c.o_lora_rank), "wq_b / wo_a size"},
      {std::int64_t(c.o_groups) * c.o_lora_rank * c.hidden, "wo_b size"},
      {std::int64_t(c.head_dim) * c.hidden * 2, "wkv / compressor size"},
      {std::int64_t(c.hidden) * (c.hc_mult + 1) * std::max(1, c.engram_max_ngram_size - 1) * c.engram_n_heads *
           c.engram_head_dim, "engram wkv size"},
  };
  for (const auto& [value, what] : products) {
    if (value > kMax) return make_error(Errc::format, where + ": " + what + " = " + std::to_string(value) + " overflows int32");
  }
  return c;
}

int ModelConfig::n_csa_layers() const {
  return static_cast<int>(std::count(attention.begin(), attention.end(), LayerAttention::csa));
}

int ModelConfig::kv_source_of(int layer) const {
  if (layer < 0 || std::size_t(layer) >= compress_ratios.size() || compress_ratios[std::size_t(layer)] == 0) return -1;
  int src = -1;
  for (int s : kv_source_layer_ids) {
    if (s <= layer) src = s;
  }
  return src;
}

int ModelConfig::n_kda_layers() const {
  return static_cast<int>(std::count(attention.begin(), attention.end(), LayerAttention::kda));
}
int ModelConfig::n_mla_layers() const {
  return static_cast<int>(std::count(attention.begin(), attention.end(), LayerAttention::mla));
}
int ModelConfig::n_moe_layers() const {
  int n = 0;
  for (int l = 0; l < n_layers; ++l) n += is_moe(l) ? 1 : 0;
  return n;
}

json ModelConfig::to_json() const {
  json j;
  if (arch == "kimi-k3") j["architectures"] = {"KimiK3ForConditionalGeneration"};
  else if (arch == "kimi-linear") j["architectures"] = {"KimiLinearForCausalLM"};
  else if (arch == "glm5-next") {
    j["architectures"] = {"Glm5NextForConditionalGeneration"};
    j["model_type"] = "glm5_next";
  }
  else if (arch == "deepseek-v4.1") {
    j["architectures"] = {"DeepseekV41ForCausalLM"};
    j["model_type"] = "deepseek_v41_text";
  }
  else if (!arch.empty()) j["architectures"] = {arch};
  j["num_hidden_layers"] = n_layers;
  j["hidden_size"] = hidden;
  j["vocab_size"] = vocab;
  if (eos_token_ids.size() > 1) j["eos_token_id"] = eos_token_ids;
  else if (eos_token_id > 0) j["eos_token_id"] = eos_token_id;
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  j["rms_norm_eps"] = rms_eps;
  j["num_experts"] = n_experts;
  j["num_experts_per_token"] = top_k;
  j["moe_intermediate_size"] = moe_inter;
  j["intermediate_size"] = dense_inter;
  j["num_shared_experts"] = n_shared;
  j["first_k_dense_replace"] = first_dense;
  j["routed_scaling_factor"] = routed_scale;
  if (renormalize) j["moe_renormalize"] = true;
  if (scoring == RouterScoring::softmax) j["scoring_func"] = "softmax";
  if (scoring == RouterScoring::sqrtsoftplus) j["scoring_func"] = "sqrtsoftplus";
  if (n_group > 1) {
    j["n_group"] = n_group;
    j["topk_group"] = topk_group;
  }
  if (n_mtp > 0) j["num_nextn_predict_layers"] = n_mtp;
  if (latent_dim > 0) j["routed_expert_hidden_size"] = latent_dim;
  if (latent_norm) j["latent_moe_use_norm"] = true;
  if (act_situ) {
    j["hidden_act"] = "situ";
    j["activation_situ_beta"] = situ_beta;
    j["activation_situ_linear_beta"] = situ_linear_beta;
  } else {
    j["hidden_act"] = "silu";
  }
  j["num_attention_heads"] = n_heads;
  j["kv_lora_rank"] = kv_lora;
  if (q_lora > 0) j["q_lora_rank"] = q_lora;
  else j["q_lora_rank"] = nullptr;
  j["qk_nope_head_dim"] = qk_nope;
  j["qk_rope_head_dim"] = qk_rope;
  j["v_head_dim"] = v_head;
  if (mla_output_gate) j["mla_use_output_gate"] = true;
  rope_config_to_json(rope, j);
  if (attn_res_block > 0) j["attn_res_block_size"] = attn_res_block;
  if (hc_mult > 0) {
    j["hc_mult"] = hc_mult;
    j["hc_sinkhorn_iters"] = hc_sinkhorn_iters;
    j["hc_eps"] = hc_eps;
  }
  if (swiglu_limit > 0.0f) j["swiglu_limit"] = swiglu_limit;
  if (index_n_heads > 0) {
    j["index_topk"] = index_topk;
    j["index_kpool"] = index_kpool;
    j["index_n_heads"] = index_n_heads;
    j["index_head_dim"] = index_head_dim;
    j["index_kpool_always_select_tail"] = index_kpool_always_select_tail;
  }
  if (head_dim > 0) j["head_dim"] = head_dim;
  if (o_groups > 0) j["o_groups"] = o_groups;
  if (o_lora_rank > 0) j["o_lora_rank"] = o_lora_rank;
  if (sliding_window > 0) j["sliding_window"] = sliding_window;
  if (!compress_ratios.empty()) j["compress_ratios"] = compress_ratios;
  if (!kv_source_layer_ids.empty()) j["kv_source_layer_ids"] = kv_source_layer_ids;
  if (!index_source_layer_ids.empty()) j["index_source_layer_ids"] = index_source_layer_ids;
  if (!kv_source_layer_ids.empty() || candidate_source_layer_id >= 0) {
    j["candidate_source_layer_id"] = candidate_source_layer_id;
    j["candidate_topk_blocks"] = candidate_topk_blocks;
    j["candidate_block_size"] = candidate_block_size;
  }
  if (compress_rope_theta > 0.0) j["compress_rope_theta"] = compress_rope_theta;
  if (gate_temp != 1.0f) j["gate_temp"] = gate_temp;
  if (attn_sink) j["attn_sink"] = true;
  if (hc_single_pass) j["hc_single_pass"] = true;
  if (!engram_layer_ids.empty()) {
    j["engram_layer_ids"] = engram_layer_ids;
    j["engram_num_embeddings"] = engram_num_embeddings;
    j["engram_vocab_size"] = engram_vocab_size;
    j["engram_max_ngram_size"] = engram_max_ngram_size;
    j["engram_n_heads"] = engram_n_heads;
    j["engram_head_dim"] = engram_head_dim;
    j["engram_pad_id"] = engram_pad_id;
    j["engram_compressed_vocab_size"] = engram_compressed_vocab_size;
  }
  if (arch == "glm5-next") {
    json types = json::array(), mlp = json::array();
    for (int l = 0; l < n_layers; ++l) {
      types.push_back(is_kda(l) ? "linear_attention" : "full_attention");
      mlp.push_back(is_moe(l) ? "sparse" : "dense");
    }
    j["layer_types"] = types;
    j["mlp_layer_types"] = mlp;
  }
  json lac;
  lac["num_heads"] = kda_heads;
  lac["head_dim"] = kda_dim;
  lac["short_conv_kernel_size"] = conv_k;
  if (full_rank_gate) lac["use_full_rank_gate"] = true;
  if (gate_lower_bound != 0.0f) lac["gate_lower_bound"] = gate_lower_bound;
  json kda = json::array(), full = json::array();
  for (int l = 0; l < n_layers; ++l) (is_kda(l) ? kda : full).push_back(l + 1);
  lac["kda_layers"] = kda;
  lac["full_attn_layers"] = full;
  j["linear_attn_config"] = lac;
  return j;
}

}  // namespace waste

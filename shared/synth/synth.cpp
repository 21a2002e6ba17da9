#include "shared/synth/synth.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "shared/container/codebooks.hpp"
#include "shared/container/container_writer.hpp"
#include "shared/container/expert_bank.hpp"
#include "shared/container/file_io.hpp"
#include "shared/container/v41_tensors.hpp"
#include "shared/fp16.hpp"
#include "shared/runtime_paths.hpp"
#include "shared/synth/synthetic_tokenizer.hpp"

namespace waste::synth {
namespace {

using nlohmann::json;

// splitmix64's finaliser: a strong 64-bit mixer, the core of the counter-based generator.
inline std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline std::uint64_t hash2(std::uint64_t key, std::uint64_t a) noexcept { return mix64(key + (a + 1) * 0x9E3779B97F4A7C15ull); }
inline std::uint64_t hash3(std::uint64_t key, std::uint64_t a, std::uint64_t b) noexcept { return hash2(hash2(key, a), b); }
// Uniform in [0, 1) from the top 24 bits (exact in float).
inline float unit(std::uint64_t h) noexcept { return float(h >> 40) * (1.0f / 16777216.0f); }

constexpr std::uint64_t kScaleSalt = 0x5CA1E5CA1E5CA1E5ull;
constexpr std::uint64_t kBookSalt = 0xB00CB00CB00CB00Cull;
constexpr std::uint64_t kExpertSalt = 0xE7E7E7E7E7E7E7E7ull;
constexpr float kCentroidRange = 0.3f;  // centroids uniform(-0.3, 0.3)

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::uint64_t tensor_key(const SynthSpec& spec, const std::string& name) { return mix64(spec.seed ^ fnv1a(name)); }

// Symmetric integer range per format, and its standard deviation (uniform over the range).
int q_half_range(TensorFormat fmt) {
  switch (fmt) {
    case TensorFormat::q8g: return 127;
    case TensorFormat::q4g: return 7;
    case TensorFormat::q3g: return 3;
    default: return 0;
  }
}
float q_std(int half) { return std::sqrt(float((2 * half + 1) * (2 * half + 1) - 1) / 12.0f); }

bool ends_with(std::string_view s, std::string_view suffix) { return s.ends_with(suffix); }
bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

float weight_std(const TensorPlan& t) {
  if (contains(t.name, "embed_tokens")) return 1.0f;
  return 1.0f / std::sqrt(float(t.cols()));
}

std::uint64_t expert_key(const SynthSpec& spec, int layer, int expert, int kind) {
  return hash3(mix64(spec.seed ^ kExpertSalt), std::uint64_t(layer) * 4 + std::uint64_t(kind), std::uint64_t(expert));
}

// The run (stage indices of one row and vector position) from its hash, in on-disk form:
// byte s = stage s for 8-bit indices; for VQ4P the low 24 bits are the 4x6-bit packing,
// which is exactly LSB-first stage order, so the same bits serve both views.
inline std::uint64_t run_bits(std::uint64_t h, const ExpertQuant& q) noexcept {
  if (q.index_bits == 6 || q.entries == 256) return h;
  std::uint64_t out = 0;
  for (int s = 0; s < q.stages; ++s) out |= ((((h >> (8 * s)) & 0xffu) * std::uint64_t(q.entries)) >> 8) << (8 * s);
  return out;
}

void plan_add(std::vector<TensorPlan>& out, const SynthSpec& spec, std::string name, std::vector<std::int64_t> shape) {
  TensorPlan t;
  t.name = spec.skeleton.tensor_prefix + name;
  t.shape = std::move(shape);
  std::int64_t elements = 1;
  for (auto d : t.shape) elements *= d;
  const bool small_matrix = t.shape.size() == 2 && spec.quantize_small_matrices;
  if (t.shape.size() == 2 && (contains(t.name, ".hc_attn_fn") || contains(t.name, ".hc_ffn_fn"))) {
    t.fmt = TensorFormat::q8g;  // mHC projections: 8 bits whatever their size (as the public engine stores them)
  } else if (t.shape.size() == 1 || (elements < 65536 && !small_matrix) || contains(t.name, "compress_ape") ||
             contains(t.name, ".engram.q_weight") || contains(t.name, ".engram.k_weight")) {
    // The indexer's per-slot pool bias and V4.1's Engram gate vectors are parameter tables, read
    // as F32 (compute/model/weights.cpp).
    t.fmt = TensorFormat::f32;
  } else if (contains(t.name, "embed_tokens") || contains(t.name, "lm_head")) {
    t.fmt = TensorFormat::q8g;
  } else {
    t.fmt = spec.trunk_fmt;
  }
  out.push_back(std::move(t));
}

Result<TensorFormat> parse_trunk_fmt(const std::string& s) {
  if (s == "q4g") return TensorFormat::q4g;
  if (s == "q8g") return TensorFormat::q8g;
  if (s == "q3g") return TensorFormat::q3g;
  return make_error(Errc::argument, "trunk format \"" + s + "\" is not one of q4g, q8g, q3g");
}

Result<ExpertQuant> parse_experts(const std::string& s) {
  ExpertQuant q;
  if (s == "vq3r") {
    q.fmt = "VQ3R";
  } else if (s == "vq2r") {
    q.fmt = "VQ2R";
    q.stages = 2;
  } else if (s == "vq4p") {
    q.fmt = "VQ4P";
    q.stages = 4;
    q.entries = 64;
    q.index_bits = 6;
  } else {
    return make_error(Errc::argument, "expert format \"" + s + "\" is not one of vq3r, vq2r, vq4p");
  }
  return q;
}

// A per-layer array (layer_types, mlp_layer_types) cut to the first n_layers entries.
void cut_per_layer(json& text, const char* key, int n_layers) {
  auto it = text.find(key);
  if (it == text.end() || !it->is_array() || int(it->size()) <= n_layers) return;
  it->erase(it->begin() + n_layers, it->end());
}

void cut_layer_list(json& lac, const char* key, int n_layers) {
  auto it = lac.find(key);
  if (it == lac.end() || !it->is_array()) return;
  json kept = json::array();
  for (const auto& v : *it) {
    if (v.is_number_integer() && v.get<int>() <= n_layers) kept.push_back(v);
  }
  *it = kept;
}

// DeepSeek-V4.1's per-layer keys cut to n layers: compress_ratios (the draft layers' zeros
// dropped too), the source lists, the candidate source (the last kept index source when it is
// cut), the Engram layers with their row counts.
void cut_v41_layers(json& text, int n) {
  if (auto it = text.find("compress_ratios"); it != text.end() && it->is_array() && int(it->size()) > n) {
    it->erase(it->begin() + n, it->end());
  }
  auto kept = [&](const char* key) {
    auto it = text.find(key);
    if (it == text.end() || !it->is_array()) return;
    json out = json::array();
    for (const auto& v : *it) {
      if (v.is_number_integer() && v.get<int>() < n) out.push_back(v);
    }
    *it = out;
  };
  kept("kv_source_layer_ids");
  kept("index_source_layer_ids");
  if (auto it = text.find("candidate_source_layer_id"); it != text.end() && it->is_number_integer() &&
                                                          it->get<int>() >= n) {
    const auto& ix = text.value("index_source_layer_ids", json::array());
    *it = ix.empty() ? json(-1) : ix.back();
  }
  auto ids = text.find("engram_layer_ids");
  auto rows = text.find("engram_num_embeddings");
  if (ids != text.end() && ids->is_array()) {
    json keep_ids = json::array(), keep_rows = json::array();
    const bool with_rows = rows != text.end() && rows->is_array() && rows->size() == ids->size();
    for (std::size_t i = 0; i < ids->size(); ++i) {
      if ((*ids)[i].is_number_integer() && (*ids)[i].get<int>() < n) {
        keep_ids.push_back((*ids)[i]);
        if (with_rows) keep_rows.push_back((*rows)[i]);
      }
    }
    *ids = keep_ids;
    if (with_rows) *rows = keep_rows;
  }
}

}  // namespace

std::int64_t TensorPlan::rows() const {
  std::int64_t r = 1;
  for (std::size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
  return r;
}

std::filesystem::path presets_dir() {
  if (const char* env = std::getenv("WASTE_PRESETS_DIR"); env != nullptr && *env != '\0') return env;
  // An install's share/waste/presets beside the binary (or $WASTE_DATA_DIR), else the source
  // tree's, named by the build (not __FILE__: ccache's base_dir makes that relative).
  if (auto installed = find_data_subdir("presets")) return *installed;
  return WASTE_PRESETS_DIR;
}

Result<json> load_preset(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name.find("..") != std::string::npos) {
    return make_error(Errc::argument, "preset name \"" + name + "\" is not a plain name");
  }
  const auto path = presets_dir() / (name + ".json");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return make_error(Errc::argument, "no preset \"" + name + "\" (looked for " + path.string() + ")");
  }
  auto text = read_text_file(path, 1 << 20);
  if (!text) return std::unexpected(text.error());
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error(Errc::format, path.string() + ": not a JSON object");
  return j;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(presets_dir(), ec), end; !ec && it != end; it.increment(ec)) {
    const auto& path = it->path();
    if (path.extension() == ".json" && it->is_regular_file(ec)) names.push_back(path.stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string preset_list() {
  const auto names = preset_names();
  if (names.empty()) return "none found in " + presets_dir().string();
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

Result<SynthSpec> make_spec(const SynthRequest& request) {
  json preset;
  if (!request.preset.empty()) {
    auto p = load_preset(request.preset);
    if (!p) return std::unexpected(p.error());
    preset = std::move(*p);
  } else {
    auto text = read_text_file(request.config_file, 1 << 20);
    if (!text) return std::unexpected(text.error());
    preset = json::parse(*text, nullptr, false);
    if (preset.is_discarded() || !preset.is_object()) {
      return make_error(Errc::format, request.config_file.string() + ": not a JSON object");
    }
  }
  return make_spec(preset, request);
}

Result<SynthSpec> make_spec(const json& preset_in, const SynthRequest& request) {
  if (!preset_in.is_object()) return make_error(Errc::format, "synth config: not a JSON object");
  json preset = preset_in;
  json knobs = json::object();
  if (auto it = preset.find("synth"); it != preset.end()) {
    if (it->is_object()) knobs = *it;
    preset.erase(it);
  }
  SynthSpec spec;
  spec.seed = request.seed;
  spec.tokenizer = request.tokenizer;
  spec.quantize_small_matrices = knobs.value("quantize_small_matrices", false);
  spec.vision_stub = knobs.value("vision_stub", false);
  if (request.vision && (request.vision_layers < 1 || request.vision_layers > 27)) {
    return make_error(Errc::argument,
                      "--vision-layers " + std::to_string(request.vision_layers) + " is out of range 1..27");
  }
  auto trunk_fmt = parse_trunk_fmt(request.trunk.value_or(knobs.value("trunk", std::string("q4g"))));
  if (!trunk_fmt) return std::unexpected(trunk_fmt.error());
  spec.trunk_fmt = *trunk_fmt;
  auto quant = parse_experts(request.experts.value_or(knobs.value("experts", std::string("vq3r"))));
  if (!quant) return std::unexpected(quant.error());

  const bool nested = preset.contains("text_config") && preset["text_config"].is_object();
  json text = nested ? preset["text_config"] : preset;
  if (request.layers != 0) {
    const int configured = text.value("num_hidden_layers", 0);
    if (request.layers < 1 || request.layers > configured) {
      return make_error(Errc::argument, "--layers " + std::to_string(request.layers) + " is out of range 1.." +
                                            std::to_string(configured));
    }
    const int n = request.layers;
    text["num_hidden_layers"] = n;
    if (text.value("first_k_dense_replace", 0) > n) text["first_k_dense_replace"] = n;
    if (text.value("attn_res_block_size", 0) > n) text["attn_res_block_size"] = n;
    cut_per_layer(text, "layer_types", n);
    cut_per_layer(text, "mlp_layer_types", n);
    cut_v41_layers(text, n);
    if (auto lac = text.find("linear_attn_config"); lac != text.end() && lac->is_object()) {
      cut_layer_list(*lac, "kda_layers", n);
      cut_layer_list(*lac, "full_attn_layers", n);
    }
  }
  if (request.tokenizer) {
    text["vocab_size"] = synthetic_tokenizer_vocab();
    text["bos_token_id"] = kSyntheticBaseTokens;
    text["eos_token_id"] = kSyntheticBaseTokens + 2;
  }
  // The converter flattens a nested text_config and keeps the outer keys under _outer.
  json config = text;
  if (nested) {
    json outer = preset;
    outer.erase("text_config");
    config["_outer"] = outer;
  }
  auto model = ModelConfig::from_json(config);
  if (!model) return std::unexpected(model.error());
  spec.skeleton.config_json = std::move(config);
  spec.skeleton.config = std::move(*model);
  spec.skeleton.arch = spec.skeleton.config.arch;
  spec.skeleton.tensor_prefix = nested ? "language_model." : knobs.value("tensor_prefix", std::string());
  spec.skeleton.quant = *quant;
  if (request.vision) {
    if (spec.skeleton.tensor_prefix.empty()) {
      return make_error(Errc::argument, "--vision needs a model with a tensor prefix (a nested text_config, e.g. "
                                        "kimi-k3 or tiny-k3): the tower must sit outside the text trunk");
    }
    VisionShape v;
    v.layers = request.vision_layers;
    v.text_hidden = spec.skeleton.config.hidden;
    if (request.tokenizer) v.media_pad_id = kSyntheticBaseTokens + 8;  // "<|media_pad|>" in the synthetic specials
    spec.vision = v;
  }
  if (spec.skeleton.config.n_experts > 0) {
    auto g = ExpertGeometry::from(spec.skeleton.config, spec.skeleton.quant);
    if (!g) return std::unexpected(g.error());
  }
  return spec;
}

std::vector<TensorPlan> plan_trunk(const SynthSpec& spec) {
  const ModelConfig& c = spec.skeleton.config;
  std::vector<TensorPlan> out;
  if (c.is_deepseek_v41()) {
    // DeepSeek-V4.1: the one tensor list the converter and the engine's bind use.
    for (const V41Tensor& t : v41_trunk_tensors(c)) plan_add(out, spec, t.name, t.shape);
    std::sort(out.begin(), out.end(), [](const TensorPlan& a, const TensorPlan& b) { return a.name < b.name; });
    return out;
  }
  const std::int64_t hid = c.hidden;
  plan_add(out, spec, "model.embed_tokens.weight", {c.vocab, hid});
  plan_add(out, spec, "model.norm.weight", {hid});
  plan_add(out, spec, "lm_head.weight", {c.vocab, hid});
  if (c.attn_res_block > 0) {
    plan_add(out, spec, "model.output_attn_res_norm.weight", {hid});
    plan_add(out, spec, "model.output_attn_res_proj.weight", {hid});
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    plan_add(out, spec, p + "input_layernorm.weight", {hid});
    plan_add(out, spec, p + "post_attention_layernorm.weight", {hid});
    if (c.uses_mhc()) {
      for (const char* site : {"hc_attn_", "hc_ffn_"}) {
        plan_add(out, spec, p + site + "fn", {c.hc_mix(), c.stream_width()});
        plan_add(out, spec, p + site + "base", {c.hc_mix()});
        plan_add(out, spec, p + site + "scale", {3});
      }
    }
    const std::string a = p + "self_attn.";
    if (c.is_kda(l)) {
      const std::int64_t H = c.kda_heads, D = c.kda_dim, C = H * D;
      for (const char* x : {"q", "k", "v"}) {
        plan_add(out, spec, a + x + "_proj.weight", {C, hid});
        plan_add(out, spec, a + x + "_conv1d.weight", {C, 1, c.conv_k});
      }
      plan_add(out, spec, a + "f_a_proj.weight", {D, hid});
      plan_add(out, spec, a + "f_b_proj.weight", {C, D});
      plan_add(out, spec, a + "b_proj.weight", {H, hid});
      plan_add(out, spec, a + "A_log", {1, 1, H, 1});
      plan_add(out, spec, a + "dt_bias", {C});
      if (c.full_rank_gate) {
        plan_add(out, spec, a + "g_proj.weight", {C, hid});
      } else {
        plan_add(out, spec, a + "g_a_proj.weight", {D, hid});
        plan_add(out, spec, a + "g_b_proj.weight", {C, D});
      }
      plan_add(out, spec, a + "o_norm.weight", {D});
      plan_add(out, spec, a + "o_proj.weight", {hid, C});
    } else {
      const std::int64_t nh = c.n_heads, qd = c.qk_nope + c.qk_rope;
      if (c.q_lora > 0) {
        plan_add(out, spec, a + "q_a_proj.weight", {c.q_lora, hid});
        plan_add(out, spec, a + "q_a_layernorm.weight", {c.q_lora});
        plan_add(out, spec, a + "q_b_proj.weight", {nh * qd, c.q_lora});
      } else {
        plan_add(out, spec, a + "q_proj.weight", {nh * qd, hid});
      }
      plan_add(out, spec, a + "kv_a_proj_with_mqa.weight", {c.kv_lora + c.qk_rope, hid});
      plan_add(out, spec, a + "kv_a_layernorm.weight", {c.kv_lora});
      plan_add(out, spec, a + "kv_b_proj.weight", {nh * (c.qk_nope + c.v_head), c.kv_lora});
      if (c.mla_output_gate) plan_add(out, spec, a + "g_proj.weight", {nh * c.v_head, hid});
      plan_add(out, spec, a + "o_proj.weight", {hid, nh * c.v_head});
      if (c.has_indexer()) {
        // GLM's k-pool DSA indexer (HF names under self_attn.indexer.; compute/forward/kpool_indexer.hpp).
        const std::string ix = a + "indexer.";
        const std::int64_t ih = c.index_n_heads, id = c.index_head_dim;
        plan_add(out, spec, ix + "wq_b.weight", {ih * id, c.q_lora});
        plan_add(out, spec, ix + "wk.weight", {id, hid});
        plan_add(out, spec, ix + "k_norm.weight", {id});
        plan_add(out, spec, ix + "k_norm.bias", {id});
        plan_add(out, spec, ix + "weights_proj.weight", {ih, hid});
        plan_add(out, spec, ix + "index_kpool_compress_gate", {id, hid});
        plan_add(out, spec, ix + "index_kpool_compress_ape", {c.index_kpool, id});
      }
    }
    if (c.attn_res_block > 0) {
      for (const char* x : {"self_attention_res_norm", "self_attention_res_proj", "mlp_res_norm", "mlp_res_proj"}) {
        plan_add(out, spec, p + x + ".weight", {hid});
      }
    }
    if (c.is_moe(l)) {
      const std::string m = p + "block_sparse_moe.";
      const std::int64_t S = c.shared_inter();
      plan_add(out, spec, m + "gate.weight", {c.n_experts, hid});
      plan_add(out, spec, m + "gate.e_score_correction_bias", {c.n_experts});
      plan_add(out, spec, m + "shared_experts.gate_proj.weight", {S, hid});
      plan_add(out, spec, m + "shared_experts.up_proj.weight", {S, hid});
      plan_add(out, spec, m + "shared_experts.down_proj.weight", {hid, S});
      if (c.latent_dim > 0) {
        plan_add(out, spec, m + "routed_expert_down_proj.weight", {c.latent_dim, hid});
        plan_add(out, spec, m + "routed_expert_up_proj.weight", {hid, c.latent_dim});
        if (c.latent_norm) plan_add(out, spec, m + "routed_expert_norm.weight", {c.latent_dim});
      }
    } else {
      plan_add(out, spec, p + "mlp.gate_proj.weight", {c.dense_inter, hid});
      plan_add(out, spec, p + "mlp.up_proj.weight", {c.dense_inter, hid});
      plan_add(out, spec, p + "mlp.down_proj.weight", {hid, c.dense_inter});
    }
  }
  if (spec.vision) {
    // Outside the prefix, as the converter places them: 2-D matrices Q8G (the 4-D patch conv
    // flattened to [hidden, 3*14*14], the [64, 64, hidden] position grid to [64*64, hidden]),
    // norm gains F32. No biases: reference §3.11's tower has none.
    const VisionShape& v = *spec.vision;
    auto add = [&](std::string name, std::vector<std::int64_t> shape) {
      TensorPlan t;
      t.name = std::move(name);
      t.fmt = shape.size() == 1 ? TensorFormat::f32 : TensorFormat::q8g;
      t.shape = std::move(shape);
      out.push_back(std::move(t));
    };
    const std::int64_t D = v.hidden, Q = v.qkv_hidden, merged = 4 * std::int64_t(v.hidden);
    add("vision_tower.patch_embed.proj.weight", {D, 3 * v.patch * v.patch});
    add("vision_tower.patch_embed.pos_emb.weight", {std::int64_t(v.pos_h) * v.pos_w, D});
    for (int b = 0; b < v.layers; ++b) {
      const std::string p = "vision_tower.encoder.blocks." + std::to_string(b) + ".";
      add(p + "norm0.weight", {D});
      add(p + "norm1.weight", {D});
      add(p + "wqkv.weight", {3 * Q, D});
      add(p + "wo.weight", {D, Q});
      add(p + "mlp.fc0.weight", {v.inter, D});
      add(p + "mlp.fc1.weight", {D, v.inter});
    }
    add("vision_tower.encoder.final_layernorm.weight", {D});
    add("mm_projector.proj.0.weight", {merged, merged});
    add("mm_projector.proj.2.weight", {v.text_hidden, merged});
    add("mm_projector.post_norm.weight", {v.text_hidden});
  }
  if (spec.vision_stub) {
    TensorPlan v;
    v.name = "vision_tower.encoder.layers.0.fc0.weight";  // outside the prefix: stays on disk
    v.shape = {128, hid};
    v.fmt = TensorFormat::q8g;
    out.push_back(std::move(v));
  }
  std::sort(out.begin(), out.end(), [](const TensorPlan& a, const TensorPlan& b) { return a.name < b.name; });
  return out;
}

json vision_json(const VisionShape& v) {
  return json{{"vt_hidden_size", v.hidden},
              {"vt_num_attention_heads", v.heads},
              {"qkv_hidden_size", v.qkv_hidden},
              {"vt_intermediate_size", v.inter},
              {"vt_num_hidden_layers", v.layers},
              {"init_pos_emb_height", v.pos_h},
              {"init_pos_emb_width", v.pos_w},
              {"text_hidden_size", v.text_hidden},
              {"patch_size", v.patch},
              {"merge_kernel_size", {2, 2}},
              {"media_placeholder_token_id", v.media_pad_id},
              {"max_patches", v.max_patches},
              {"image_mean", {0.5, 0.5, 0.5}},
              {"image_std", {0.5, 0.5, 0.5}},
              {"vt_rms_eps", 1.1920928955078125e-07},
              {"projector_ln_eps", 1e-5}};
}

void generate_row_q(const SynthSpec& spec, const TensorPlan& t, std::int64_t row, std::span<std::int8_t> q,
                    std::span<std::uint16_t> scales) {
  const std::uint64_t key = tensor_key(spec, t.name);
  const int half = q_half_range(t.fmt);
  const std::uint32_t levels = 2u * std::uint32_t(half) + 1u;
  const std::int64_t n = t.cols();
  for (std::int64_t c0 = 0; c0 < n; c0 += 8) {
    const std::uint64_t h = hash3(key, std::uint64_t(row), std::uint64_t(c0 / 8));
    const std::int64_t end = std::min<std::int64_t>(c0 + 8, n);
    for (std::int64_t c = c0; c < end; ++c) {
      const std::uint32_t byte = (h >> (8 * (c - c0))) & 0xffu;
      q[c] = static_cast<std::int8_t>(int((byte * levels) >> 8) - half);
    }
  }
  const float base = weight_std(t) / q_std(half);
  for (std::int64_t g = 0; g < t.n_groups(); ++g) {
    const float u = unit(hash3(key ^ kScaleSalt, std::uint64_t(row), std::uint64_t(g)));
    scales[g] = f32_to_fp16(base * (0.75f + 0.5f * u));
  }
}

void generate_row_f32(const SynthSpec& spec, const TensorPlan& t, std::int64_t row, std::span<float> out) {
  const std::uint64_t key = tensor_key(spec, t.name);
  float lo = -0.5f, hi = 0.5f;  // conv1d weights, dt_bias and any other vector
  const std::string_view name = t.name;
  if (ends_with(name, "norm.weight") || ends_with(name, "norm0.weight") || ends_with(name, "norm1.weight")) {
    lo = 0.9f, hi = 1.1f;  // RMSNorm gains near 1
  } else if ((ends_with(name, ".hc_attn_scale") || ends_with(name, ".hc_ffn_scale"))) {
    lo = 0.5f, hi = 1.5f;  // mHC logit scales near 1 (the reference initialises them to 1)
  } else if (ends_with(name, "_res_proj.weight")) {
    lo = -0.1f, hi = 0.1f;  // AttnRes pseudo-queries: mild preferences between blocks
  } else if (ends_with(name, "A_log")) {
    lo = -1.0f, hi = 0.5f;
  } else if (contains(name, "e_score_correction_bias") || contains(name, "gate.bias_vl")) {
    lo = -0.05f, hi = 0.05f;
  } else if (t.shape.size() == 2) {
    const float a = std::sqrt(3.0f) * weight_std(t);  // uniform with the matrix's target std
    lo = -a, hi = a;
  }
  for (std::int64_t c = 0; c < t.cols(); ++c) out[c] = lo + (hi - lo) * unit(hash3(key, std::uint64_t(row), std::uint64_t(c)));
}

void generate_codebook(const SynthSpec& spec, int book, std::span<std::uint16_t> out) {
  const std::uint64_t key = hash2(mix64(spec.seed ^ kBookSalt), std::uint64_t(book));
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = f32_to_fp16(kCentroidRange * (2.0f * unit(hash2(key, i)) - 1.0f));
  }
}

int codebook_base(const SynthSpec& spec, int layer) {
  const ModelConfig& c = spec.skeleton.config;
  int before = 0;
  for (int l = 0; l < layer; ++l) before += c.is_moe(l) ? 1 : 0;
  return 3 * spec.skeleton.quant.stages * before;
}

std::array<std::uint8_t, 8> expert_indices(const SynthSpec& spec, int layer, int expert, int kind, int row, int vec) {
  const ExpertQuant& q = spec.skeleton.quant;
  const std::uint64_t row_key = hash2(expert_key(spec, layer, expert, kind), std::uint64_t(row));
  const std::uint64_t bits = run_bits(hash2(row_key, std::uint64_t(vec)), q);
  std::array<std::uint8_t, 8> out{};
  for (int s = 0; s < q.stages; ++s) {
    out[s] = q.index_bits == 6 ? std::uint8_t((bits >> (6 * s)) & 63u) : std::uint8_t((bits >> (8 * s)) & 0xffu);
  }
  return out;
}

std::uint16_t expert_row_scale(const SynthSpec& spec, int layer, int expert, int kind, int row) {
  const ModelConfig& c = spec.skeleton.config;
  const int cols = kind == 2 ? c.moe_inter : c.expert_input_dim();
  const float centroid_std = kCentroidRange / std::sqrt(3.0f);
  const float base = 1.0f / (std::sqrt(float(cols)) * centroid_std * std::sqrt(float(spec.skeleton.quant.stages)));
  const float u = unit(hash2(expert_key(spec, layer, expert, kind) ^ kScaleSalt, std::uint64_t(row)));
  return f32_to_fp16(base * (0.75f + 0.5f * u));
}

void encode_expert_record(const SynthSpec& spec, const ExpertGeometry& g, int layer, int expert,
                          std::span<std::byte> record) {
  const ExpertQuant& q = spec.skeleton.quant;
  std::memset(record.data(), 0, record.size());  // padding rows of the last block stay zero
  auto* base = reinterpret_cast<std::uint8_t*>(record.data());
  const int bpr = g.bytes_per_run();
  std::uint64_t row_keys[kIndexBlockRows];
  for (int kind = 0; kind < 3; ++kind) {
    const std::uint64_t key = expert_key(spec, layer, expert, kind);
    const int rows = g.rows[kind];
    const int nvr = g.cols[kind] / g.vec_dim;
    std::uint8_t* dst = base + g.offset_of(static_cast<MatrixKind>(kind));
    for (int b0 = 0; b0 < rows; b0 += kIndexBlockRows) {
      const int live = std::min(kIndexBlockRows, rows - b0);
      for (int rr = 0; rr < live; ++rr) row_keys[rr] = hash2(key, std::uint64_t(b0 + rr));
      for (int v = 0; v < nvr; ++v) {
        std::uint8_t* run = dst + (std::uint64_t(b0 / kIndexBlockRows) * nvr + v) * kIndexBlockRows * bpr;
        for (int rr = 0; rr < live; ++rr) {
          const std::uint64_t bits = run_bits(hash2(row_keys[rr], std::uint64_t(v)), q);
          std::memcpy(run + rr * bpr, &bits, std::size_t(bpr));  // little-endian: byte s = stage s
        }
      }
    }
    std::uint8_t* scales = base + g.scales_offset(static_cast<MatrixKind>(kind));
    for (int r = 0; r < rows; ++r) {
      const std::uint16_t s = expert_row_scale(spec, layer, expert, kind, r);
      std::memcpy(scales + 2 * r, &s, 2);
    }
  }
  finish_record(record, g, layer, expert, codebook_base(spec, layer));
}

void pack_row(TensorFormat fmt, std::span<const std::int8_t> q, std::span<std::byte> out) {
  std::memset(out.data(), 0, out.size());
  auto* p = reinterpret_cast<std::uint8_t*>(out.data());
  const std::size_t n = q.size();
  switch (fmt) {
    case TensorFormat::q8g:
      std::memcpy(p, q.data(), n);
      break;
    case TensorFormat::q4g:
      for (std::size_t i = 0; i < n; ++i) p[i >> 1] |= std::uint8_t((q[i] + 8) << ((i & 1) * 4));
      break;
    case TensorFormat::q3g:
      for (std::size_t i = 0; i < n; ++i) {
        const unsigned u = unsigned(q[i] + 4) & 7u;
        const std::size_t bit = 3 * i;
        p[bit >> 3] |= std::uint8_t(u << (bit & 7));
        if ((bit & 7) > 5) p[(bit >> 3) + 1] |= std::uint8_t(u >> (8 - (bit & 7)));
      }
      break;
    default:
      break;
  }
}

Result<SynthStats> write_container(const SynthSpec& spec, const std::filesystem::path& out_dir) {
  auto writer = ContainerWriter::create(out_dir, spec.skeleton, /*durable=*/false);
  if (!writer) return std::unexpected(writer.error());
  SynthStats stats;
  const ModelConfig& c = spec.skeleton.config;

  std::vector<std::int8_t> q;
  std::vector<std::uint16_t> scales;
  std::vector<float> f;
  std::vector<std::byte> row_bytes;
  for (const TensorPlan& t : plan_trunk(spec)) {
    WASTE_TRY(writer->begin_tensor(t.name, t.shape, t.fmt));
    TrunkTensorInfo info;
    info.fmt = t.fmt;
    info.shape = t.shape;
    row_bytes.resize(std::size_t(info.row_stride_bytes()));
    for (std::int64_t r = 0; r < t.rows(); ++r) {
      if (t.fmt == TensorFormat::f32) {
        f.resize(std::size_t(t.cols()));
        generate_row_f32(spec, t, r, f);
        std::memcpy(row_bytes.data(), f.data(), row_bytes.size());
        WASTE_TRY(writer->append_row(row_bytes, {}));
      } else {
        q.resize(std::size_t(t.cols()));
        scales.resize(std::size_t(t.n_groups()));
        generate_row_q(spec, t, r, q, scales);
        pack_row(t.fmt, q, row_bytes);
        WASTE_TRY(writer->append_row(row_bytes, scales));
      }
    }
    WASTE_TRY(writer->end_tensor());
    stats.trunk_bytes += info.payload_bytes() + info.scale_bytes();
    ++stats.n_tensors;
  }

  if (c.n_experts > 0) {
    const ExpertQuant& quant = spec.skeleton.quant;
    const int n_books = 3 * quant.stages * c.n_moe_layers();
    std::vector<std::uint16_t> book(std::size_t(quant.entries) * quant.vec_dim);
    for (int b = 0; b < n_books; ++b) {
      generate_codebook(spec, b, book);
      WASTE_TRY(writer->add_codebook(book));
    }
    auto geometry = ExpertGeometry::from(c, quant);
    if (!geometry) return std::unexpected(geometry.error());
    AlignedBuffer record(geometry->record_bytes);
    for (int l = 0; l < c.n_layers; ++l) {
      if (!c.is_moe(l)) continue;
      WASTE_TRY(writer->begin_bank(l, codebook_base(spec, l)));
      for (int e = 0; e < c.n_experts; ++e) {
        encode_expert_record(spec, *geometry, l, e, record.span());
        WASTE_TRY(writer->append_record(record.span()));
      }
      WASTE_TRY(writer->end_bank());
      stats.expert_bytes += geometry->record_bytes * std::uint64_t(c.n_experts);
      ++stats.n_banks;
    }
  }
  if (spec.tokenizer) WASTE_TRY(write_synthetic_tokenizer(out_dir, spec.seed));
  if (spec.vision) WASTE_TRY(write_file_atomic(out_dir / "vision.json", vision_json(*spec.vision).dump(1) + "\n"));
  auto manifest = writer->finish();
  if (!manifest) return std::unexpected(manifest.error());
  return stats;
}

Result<Manifest> plan_manifest(const SynthSpec& spec) {
  Manifest m = spec.skeleton;
  m.trunk.clear();
  m.banks.clear();
  std::uint64_t offset = 0;  // trunk.bin grows as ContainerWriter appends: payload, then scales
  for (const TensorPlan& t : plan_trunk(spec)) {
    TrunkTensorInfo info;
    info.name = t.name;
    info.fmt = t.fmt;
    info.shape = t.shape;
    info.group = 128;
    info.offset = offset;
    offset += info.payload_bytes();
    if (info.quantized()) {
      info.scale_offset = offset;
      offset += info.scale_bytes();
    }
    info.bytes = info.payload_bytes() + info.scale_bytes();
    m.trunk.push_back(std::move(info));
  }
  const ModelConfig& c = m.config;
  if (c.n_experts > 0) {
    auto geometry = ExpertGeometry::from(c, m.quant);
    if (!geometry) return std::unexpected(geometry.error());
    for (int l = 0; l < c.n_layers; ++l) {
      if (!c.is_moe(l)) continue;
      ExpertBankInfo bank;
      bank.layer = l;
      bank.file = "experts-L" + std::to_string(l) + ".bin";
      bank.experts = c.n_experts;
      bank.bytes = geometry->record_bytes * std::uint64_t(c.n_experts);
      bank.codebook_base = codebook_base(spec, l);
      m.banks[l] = std::move(bank);
    }
  }
  auto parsed = Manifest::parse(m.to_json_text());
  if (!parsed) return std::unexpected(parsed.error().with_context("planned manifest"));
  return std::move(*parsed);
}

}  // namespace waste::synth

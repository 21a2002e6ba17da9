// manifest.json parsing details: nested vs flattened K3 configs, defaults, presence flags.
#include <catch2/catch.hpp>

#include "shared/container/manifest.hpp"
#include "shared/synth/synth.hpp"

using namespace waste;
using nlohmann::json;

namespace {

json tiny_text_config() {
  auto preset = synth::load_preset("tiny");
  REQUIRE(preset.has_value());
  json j = *preset;
  j.erase("synth");
  return j;
}

json manifest_with(json config, bool with_prefix) {
  json m = {{"format_version", 0}, {"config", std::move(config)}, {"trunk", json::array()}};
  json layers = json::object();
  for (int l = 1; l < 4; ++l) {
    layers[std::to_string(l)] = {{"file", "experts-L" + std::to_string(l) + ".bin"}, {"experts", 8},
                                 {"bytes", 8 * 12288}, {"codebook_base", 9 * (l - 1)}};
  }
  m["layers"] = layers;
  if (with_prefix) m["tensor_prefix"] = "language_model.";
  return m;
}

}  // namespace

TEST_CASE("a raw nested text_config is used and defaults the prefix to language_model.", "[shared][container]") {
  json outer = {{"architectures", {"KimiK3ForConditionalGeneration"}}, {"text_config", tiny_text_config()}};
  outer["text_config"]["hidden_size"] = 192;  // only the nested value may be read
  outer["hidden_size"] = 7;
  auto m = Manifest::parse(manifest_with(outer, false).dump());
  if (!m) FAIL(m.error().message);
  REQUIRE(m->tensor_prefix == "language_model.");
  REQUIRE(m->config.hidden == 192);
  REQUIRE(m->config.arch == "kimi-k3");
  REQUIRE(m->quant.stages == 3);       // expert_quant absent: converter defaults
  REQUIRE(m->quant.index_bits == 8);
}

TEST_CASE("a flattened config takes its architecture from _outer", "[shared][container]") {
  json flat = tiny_text_config();
  flat["_outer"] = {{"architectures", {"KimiK3ForConditionalGeneration"}}};
  auto m = Manifest::parse(manifest_with(flat, true).dump());
  REQUIRE(m.has_value());
  REQUIRE(m->config.arch == "kimi-k3");
  REQUIRE(m->tensor_prefix == "language_model.");
  flat.erase("_outer");
  m = Manifest::parse(manifest_with(flat, false).dump());
  REQUIRE(m.has_value());
  REQUIRE(m->config.arch == "kimi-linear");
  REQUIRE(m->tensor_prefix.empty());
}

TEST_CASE("config layer kinds, flags and derived sizes follow the reference rules", "[shared][container]") {
  json c = tiny_text_config();
  auto cfg = ModelConfig::from_json(c);
  REQUIRE(cfg.has_value());
  REQUIRE(cfg->is_kda(0));
  REQUIRE(cfg->is_kda(1));
  REQUIRE_FALSE(cfg->is_kda(2));  // kda_layers are 1-based: [1,2,4] -> 0,1,3
  REQUIRE(cfg->is_kda(3));
  REQUIRE_FALSE(cfg->is_moe(0));
  REQUIRE(cfg->is_moe(1));
  REQUIRE(cfg->renormalize);
  REQUIRE(cfg->q_lora == 0);      // null
  REQUIRE(cfg->routed_scale == 2.0f);
  c.erase("moe_renormalize");
  REQUIRE_FALSE(ModelConfig::from_json(c)->renormalize);
  c["moe_renormalize"] = false;     // a compatible reader treats it as a boolean
  REQUIRE_FALSE(ModelConfig::from_json(c)->renormalize);
  c["rms_norm_eps"] = 1.5;
  REQUIRE(ModelConfig::from_json(c).error().message == "config.rms_norm_eps: 1.500000 is not in (0, 1)");
  c["rms_norm_eps"] = 1e-5;
  c["linear_attn_config"]["kda_layers"] = {1, 5};
  REQUIRE(ModelConfig::from_json(c).error().message == "config.linear_attn_config.kda_layers: entry 5 is not a layer number 1..4");
  c["linear_attn_config"]["kda_layers"] = {1};
  c["kv_lora_rank"] = 0;
  REQUIRE(ModelConfig::from_json(c).error().message == "config: MLA layers need kv_lora_rank >= 1");
  c["kv_lora_rank"] = 32;
  c["num_attention_heads"] = 65536;
  c["qk_nope_head_dim"] = 1 << 20;
  REQUIRE(ModelConfig::from_json(c).error().message.ends_with("overflows int32"));
}

TEST_CASE("a synthesised manifest survives to_json_text and parse unchanged", "[shared][container]") {
  synth::SynthRequest req;
  req.preset = "tiny-k3";
  auto spec = synth::make_spec(req);
  REQUIRE(spec.has_value());
  Manifest m = spec->skeleton;
  for (const auto& p : synth::plan_trunk(*spec)) {
    TrunkTensorInfo t;
    t.name = p.name;
    t.fmt = p.fmt;
    t.shape = p.shape;
    t.offset = 100;
    t.scale_offset = 200;
    t.bytes = t.payload_bytes() + t.scale_bytes();
    m.trunk.push_back(t);
  }
  for (int l = 1; l < 6; ++l) m.banks[l] = ExpertBankInfo{l, "experts-L" + std::to_string(l) + ".bin", 8, 8 * 8192, 9 * (l - 1)};
  const std::string text = m.to_json_text();
  auto back = Manifest::parse(text);
  if (!back) FAIL(back.error().message);
  REQUIRE(back->to_json_text() == text);
  REQUIRE(back->trunk.size() == m.trunk.size());
  REQUIRE(back->find_tensor("model.layers.3.self_attn.q_b_proj.weight") != nullptr);
}

TEST_CASE("real-shape presets give the reference record sizes", "[shared][container]") {
  struct Case {
    const char* preset;
    std::uint64_t record;
    int layers, experts, moe_layers;
  };
  for (const Case& c : {Case{"kimi-linear", 2'666'496, 27, 256, 26}, Case{"kimi-k3", 12'406'784, 93, 896, 92}}) {
    INFO(c.preset);
    synth::SynthRequest req;
    req.preset = c.preset;
    auto spec = synth::make_spec(req);
    if (!spec) FAIL(spec.error().message);
    const ModelConfig& cfg = spec->skeleton.config;
    REQUIRE(cfg.n_layers == c.layers);
    REQUIRE(cfg.n_experts == c.experts);
    REQUIRE(cfg.n_moe_layers() == c.moe_layers);
    auto g = ExpertGeometry::from(cfg, spec->skeleton.quant);
    REQUIRE(g.has_value());
    REQUIRE(g->record_bytes == c.record);
    // --layers cuts the layer lists with the model.
    req.layers = 8;
    auto cut = synth::make_spec(req);
    REQUIRE(cut.has_value());
    REQUIRE(cut->skeleton.config.n_layers == 8);
    REQUIRE(cut->skeleton.config.n_moe_layers() == 7);
  }
  auto k3 = synth::make_spec(synth::SynthRequest{.preset = "kimi-k3"});
  REQUIRE(k3->skeleton.config.n_kda_layers() == 69);
  REQUIRE(k3->skeleton.config.n_mla_layers() == 24);
  REQUIRE(k3->skeleton.config.kda_channels() == 12288);
  REQUIRE(k3->skeleton.tensor_prefix == "language_model.");
}

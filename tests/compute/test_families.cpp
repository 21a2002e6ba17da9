// The family plans (compute/forward/families/): which family claims a config, and the blocks it
// chooses per layer, checked layer by layer on the synthetic presets and against the rules
// ModelWeights::bind binds each layer by (ModelConfig::is_kda, is_moe), so the layer loop runs
// the blocks whose weights were bound.
#include <catch2/catch.hpp>

#include <string>

#include "compute/forward/families/family.hpp"
#include "shared/synth/synth.hpp"

namespace waste {
namespace {

ModelConfig preset_config(const std::string& name) {
  synth::SynthRequest request;
  request.preset = name;
  auto spec = synth::make_spec(request);  // pure: nothing is written
  INFO((spec ? std::string() : spec.error().message));
  REQUIRE(spec);
  return spec->skeleton.config;
}

// One letter pair per layer: K(DA) or M(LA), then d(ense FFN) or m(oE).
std::string layers_of(const forward::ModelPlan& plan) {
  std::string s;
  for (const forward::LayerPlan& l : plan.layers) {
    if (!s.empty()) s += ' ';
    s += l.attention == forward::AttentionKind::kda ? 'K' : 'M';
    s += l.mixer == forward::MixerKind::moe ? 'm' : 'd';
  }
  return s;
}

}  // namespace

TEST_CASE("Each preset is claimed by its family, which picks every layer's blocks", "[compute][families]") {
  const forward::ModelPlan tiny = forward::plan_model(preset_config("tiny"));
  CHECK(tiny.family == "kimi-linear");
  CHECK(tiny.residual == forward::ResidualKind::add);
  CHECK(layers_of(tiny) == "Kd Km Mm Km");  // kda_layers [1, 2, 4] (1-based), first_k_dense_replace 1

  const forward::ModelPlan k3 = forward::plan_model(preset_config("tiny-k3"));
  CHECK(k3.family == "kimi-k3");
  CHECK(k3.residual == forward::ResidualKind::attn_res);
  CHECK(layers_of(k3) == "Kd Km Km Mm Km Km");

  const forward::ModelPlan v3 = forward::plan_model(preset_config("tiny-v3"));
  CHECK(v3.family == "deepseek-v3");
  CHECK(v3.residual == forward::ResidualKind::add);
  CHECK(layers_of(v3) == "Md Mm Mm Mm");

  const forward::ModelPlan k2 = forward::plan_model(preset_config("tiny-k2"));  // DeepseekV3ForCausalLM
  CHECK(k2.family == "deepseek-v3");
  CHECK(layers_of(k2) == "Md Mm Mm");

  for (const char* name : {"tiny", "tiny-k3", "tiny-v3", "tiny-k2", "kimi-linear", "kimi-k3", "deepseek-v3"}) {
    const ModelConfig c = preset_config(name);
    const forward::ModelPlan plan = forward::plan_model(c);
    REQUIRE(plan.layers.size() == std::size_t(c.n_layers));
    for (int layer = 0; layer < c.n_layers; ++layer) {
      INFO(name << " layer " << layer);
      CHECK((plan.layers[std::size_t(layer)].attention == forward::AttentionKind::kda) == c.is_kda(layer));
      CHECK((plan.layers[std::size_t(layer)].mixer == forward::MixerKind::moe) == c.is_moe(layer));
    }
    CHECK((plan.residual == forward::ResidualKind::attn_res) == (c.attn_res_block > 0));
  }
}

TEST_CASE("A config no family claims runs by the v0 container's rules", "[compute][families]") {
  ModelConfig c = preset_config("tiny");
  c.arch = "SomethingElseForCausalLM";
  const forward::ModelPlan plan = forward::plan_model(c);
  CHECK(plan.family == "v0");
  CHECK(layers_of(plan) == "Kd Km Mm Km");
  c.attn_res_block = 2;
  CHECK(forward::plan_model(c).residual == forward::ResidualKind::attn_res);
}

TEST_CASE("GLM-5.3-Flash is claimed by glm5_next with mHC and its 45-layer layout", "[compute][families]") {
  const forward::ModelPlan tiny = forward::plan_model(preset_config("tiny-glm"));
  CHECK(tiny.family == "glm5-next");
  CHECK(tiny.residual == forward::ResidualKind::mhc);
  CHECK(layers_of(tiny) == "Kd Kd Kd Mm Km Km Km Mm");  // layer_types, 3 dense layers first

  const ModelConfig real = preset_config("glm-5.3-flash");
  const forward::ModelPlan plan = forward::plan_model(real);
  CHECK(plan.family == "glm5-next");
  CHECK(plan.residual == forward::ResidualKind::mhc);
  REQUIRE(plan.layers.size() == 45);
  int kda = 0, mla = 0, dense = 0;
  for (int layer = 0; layer < 45; ++layer) {
    const forward::LayerPlan& l = plan.layers[std::size_t(layer)];
    INFO("layer " << layer);
    CHECK((l.attention == forward::AttentionKind::mla) == (layer % 4 == 3));  // MLA at 3, 7, ..., 43
    CHECK((l.mixer == forward::MixerKind::dense_ffn) == (layer < 3));
    CHECK(l.indexed == (l.attention == forward::AttentionKind::mla));  // the DSA indexer on every MLA layer
    kda += l.attention == forward::AttentionKind::kda;
    mla += l.attention == forward::AttentionKind::mla;
    dense += l.mixer == forward::MixerKind::dense_ffn;
  }
  CHECK(kda == 34);
  CHECK(mla == 11);
  CHECK(dense == 3);
  CHECK(real.qk_rope == 0);
  CHECK(real.gate_lower_bound == -5.0f);
  CHECK(real.swiglu_limit == 10.0f);
  CHECK(real.n_experts == 288);
  CHECK(real.top_k == 8);

  // Any config with hc_mult is GLM's (no other family has hyper-connections).
  ModelConfig other = preset_config("tiny");
  other.hc_mult = 4;
  CHECK(forward::plan_model(other).family == "glm5-next");
  CHECK(forward::plan_model(other).residual == forward::ResidualKind::mhc);
  for (const forward::LayerPlan& l : forward::plan_model(other).layers) CHECK_FALSE(l.indexed);  // no index_* keys

  // The indexer's layers: tiny-glm's MLA layers 3 and 7, none without index_n_heads.
  for (int layer = 0; layer < 8; ++layer) CHECK(tiny.layers[std::size_t(layer)].indexed == (layer % 4 == 3));
  ModelConfig no_index = preset_config("tiny-glm");
  no_index.index_n_heads = 0;
  for (const forward::LayerPlan& l : forward::plan_model(no_index).layers) CHECK_FALSE(l.indexed);
}

}  // namespace waste

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

}  // namespace waste

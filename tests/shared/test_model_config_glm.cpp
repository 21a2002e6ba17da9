// GLM-5.3-Flash's config keys (shared/container/model_config): mHC, the SwiGLU clamp and the
// indexer's shape read under their HF names, bounded with errors naming the key; the layer
// layout from layer_types (a kda_layers list beside it 1-based or GLM's 0-based, anything else
// refused) and mlp_layer_types; everything written back by to_json.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/container/model_config.hpp"
#include "shared/synth/synth.hpp"

namespace waste {
namespace {

using nlohmann::json;

json tiny_glm() {
  auto preset = synth::load_preset("tiny-glm");
  REQUIRE(preset);
  json j = *preset;
  j.erase("synth");
  return j;
}

std::string error_of(const json& j) {
  auto c = ModelConfig::from_json(j);
  REQUIRE_FALSE(c);
  return c.error().message;
}

}  // namespace

TEST_CASE("GLM config keys parse under their HF names and survive to_json", "[shared][container][glm]") {
  auto c = ModelConfig::from_json(tiny_glm());
  REQUIRE(c);
  CHECK(c->arch == "glm5-next");
  CHECK(c->hc_mult == 4);
  CHECK(c->hc_sinkhorn_iters == 20);
  CHECK(c->hc_eps == 1e-6f);
  CHECK(c->swiglu_limit == 0.75f);
  CHECK(c->index_topk == 16);
  CHECK(c->index_kpool == 4);
  CHECK(c->index_n_heads == 2);
  CHECK(c->index_head_dim == 32);
  CHECK(c->index_kpool_always_select_tail);
  CHECK(c->stream_width() == 4 * 128);
  CHECK(c->hc_mix() == 24);
  CHECK(c->gate_lower_bound == -5.0f);
  CHECK(c->first_dense == 3);
  std::string layout;
  for (int l = 0; l < c->n_layers; ++l) layout += c->is_kda(l) ? 'K' : 'M';
  CHECK(layout == "KKKMKKKM");

  auto back = ModelConfig::from_json(c->to_json());
  REQUIRE(back);
  CHECK(back->arch == "glm5-next");
  CHECK(back->hc_mult == 4);
  CHECK(back->hc_sinkhorn_iters == 20);
  CHECK(back->hc_eps == 1e-6f);
  CHECK(back->swiglu_limit == 0.75f);
  CHECK(back->index_topk == 16);
  CHECK(back->index_kpool == 4);
  CHECK(back->index_n_heads == 2);
  CHECK(back->index_head_dim == 32);
  CHECK(back->index_kpool_always_select_tail);
  CHECK(back->attention == c->attention);
  CHECK(back->first_dense == 3);
  CHECK(c->to_json()["layer_types"][3] == "full_attention");

  // Absent keys: no mHC, no clamp, no indexer (every other family).
  json plain = tiny_glm();
  for (const char* k : {"hc_mult", "swiglu_limit", "index_n_heads", "architectures", "model_type"}) plain.erase(k);
  auto p = ModelConfig::from_json(plain);
  REQUIRE(p);
  CHECK(p->hc_mult == 0);
  CHECK_FALSE(p->uses_mhc());
  CHECK(p->stream_width() == 128);
  CHECK(p->swiglu_limit == 0.0f);
  CHECK_FALSE(p->has_indexer());
  plain["swiglu_limit"] = nullptr;  // HF's "no clamp"
  CHECK(ModelConfig::from_json(plain)->swiglu_limit == 0.0f);
}

TEST_CASE("GLM config keys out of range are refused naming the key", "[shared][container][glm]") {
  json j = tiny_glm();
  j["hc_mult"] = 17;
  CHECK(error_of(j) == "config.hc_mult: 17 is out of range 0..16");
  j["hc_mult"] = "4";
  CHECK(error_of(j) == "config.hc_mult: expected an integer, found string");
  j["hc_mult"] = 4;
  j["hc_sinkhorn_iters"] = 0;
  CHECK(error_of(j) == "config.hc_sinkhorn_iters: 0 is out of range 1..1000");
  j["hc_sinkhorn_iters"] = 20;
  j["hc_eps"] = 1.5;
  CHECK(error_of(j) == "config.hc_eps: 1.500000 is not in [0, 1)");
  j["hc_eps"] = 1e-6;
  j["swiglu_limit"] = -1.0;
  CHECK(error_of(j) == "config.swiglu_limit: -1.000000 is not in [0, 1e6] (0 = no clamp)");
  j["swiglu_limit"] = 10.0;
  j["index_topk"] = 62;
  CHECK(error_of(j) == "config: index_topk 62 is not a multiple of index_kpool 4");
  j["index_topk"] = 64;
  j["index_kpool_always_select_tail"] = 1;
  CHECK(error_of(j) == "config.index_kpool_always_select_tail: expected a boolean, found number");
  j["index_kpool_always_select_tail"] = true;
  j["index_n_heads"] = 5000;
  CHECK(error_of(j) == "config.index_n_heads: 5000 is out of range 0..4096");
  j["index_n_heads"] = 2;
  j["hidden_size"] = 16;
  j["num_attention_heads"] = 4;
  j["hc_mult"] = 4;
  CHECK(error_of(j) == "config: hc_mult 4 needs hidden_size >= hc_mult * (hc_mult + 1)");
  j["hidden_size"] = 128;
  j["attn_res_block_size"] = 2;
  CHECK(error_of(j) ==
        "config: hc_mult (mHC) and attn_res_block_size (Attention Residuals) exclude each other");
  j.erase("attn_res_block_size");
  j["hidden_act"] = "situ";
  CHECK(error_of(j) == "config: swiglu_limit clamps SiLU gates; hidden_act situ has none");
}

TEST_CASE("GLM layer layout: layer_types decides, kda_layers beside it must agree", "[shared][container][glm]") {
  json j = tiny_glm();
  // GLM's own 0-based list (the HF config.json) agrees with layer_types: accepted.
  j["linear_attn_config"]["kda_layers"] = {0, 1, 2, 4, 5, 6};
  auto c = ModelConfig::from_json(j);
  REQUIRE(c);
  CHECK(c->is_kda(0));
  CHECK_FALSE(c->is_kda(3));
  CHECK_FALSE(c->is_kda(7));
  // A list that matches neither reading is refused.
  j["linear_attn_config"]["kda_layers"] = {1, 2, 3, 4};
  CHECK(error_of(j) == "config.linear_attn_config.kda_layers: contradicts layer_types (neither 1-based nor "
                       "0-based it names the linear_attention layers)");
  // Without layer_types the v0 rule stands: 1-based, 0 refused.
  j["linear_attn_config"]["kda_layers"] = {0, 1};
  j.erase("layer_types");
  CHECK(error_of(j) == "config.linear_attn_config.kda_layers: entry 0 is not a layer number 1..8");
  j = tiny_glm();
  j["layer_types"] = {"linear_attention"};
  CHECK(error_of(j) == "config.layer_types: expected an array of num_hidden_layers (8) strings");
  j = tiny_glm();
  j["layer_types"][2] = "sliding_attention";
  CHECK(error_of(j) == "config.layer_types: entry 2 \"sliding_attention\" is not linear_attention, full_attention "
                       "or deepseek_sparse_attention");
  j = tiny_glm();
  j["layer_types"][2] = "deepseek_sparse_attention";  // HF's name for the MLA layers
  j["linear_attn_config"].erase("kda_layers");
  c = ModelConfig::from_json(j);
  REQUIRE(c);
  CHECK_FALSE(c->is_kda(2));
}

TEST_CASE("GLM mlp_layer_types gives the dense prefix", "[shared][container][glm]") {
  json j = tiny_glm();
  j.erase("first_k_dense_replace");
  auto c = ModelConfig::from_json(j);
  REQUIRE(c);
  CHECK(c->first_dense == 3);
  CHECK_FALSE(c->is_moe(2));
  CHECK(c->is_moe(3));
  j["first_k_dense_replace"] = 2;
  CHECK(error_of(j) == "config: first_k_dense_replace 2 and mlp_layer_types (3 dense layers first) contradict "
                       "each other");
  j.erase("first_k_dense_replace");
  j["mlp_layer_types"][5] = "dense";
  CHECK(error_of(j) == "config.mlp_layer_types: dense layer 5 after a sparse one (dense layers must come first)");
  j["mlp_layer_types"][5] = "moe";
  CHECK(error_of(j) == "config.mlp_layer_types: entry 5 \"moe\" is not dense or sparse");
}

TEST_CASE("waste synth writes the mHC projections Q8G and the glm-5.3-flash preset's real shapes", "[shared][container][glm]") {
  synth::SynthRequest request;
  request.preset = "tiny-glm";
  auto spec = synth::make_spec(request);
  REQUIRE(spec);
  int fn = 0, base = 0, scale = 0;
  for (const synth::TensorPlan& t : synth::plan_trunk(*spec)) {
    if ((t.name.ends_with(".hc_attn_fn") || t.name.ends_with(".hc_ffn_fn"))) {
      ++fn;
      CHECK(t.fmt == TensorFormat::q8g);  // 8 bits although the trunk is q4g
      CHECK(t.shape == std::vector<std::int64_t>{24, 4 * 128});
    }
    if ((t.name.ends_with(".hc_attn_base") || t.name.ends_with(".hc_ffn_base"))) {
      ++base;
      CHECK(t.fmt == TensorFormat::f32);
    }
    if ((t.name.ends_with(".hc_attn_scale") || t.name.ends_with(".hc_ffn_scale"))) {
      ++scale;
      CHECK(t.shape == std::vector<std::int64_t>{3});
    }
  }
  CHECK(fn == 2 * 8);  // attention and FFN site of every layer
  CHECK(base == 2 * 8);
  CHECK(scale == 2 * 8);

  request.preset = "glm-5.3-flash";
  request.layers = 5;
  auto real = synth::make_spec(request);
  INFO((real ? std::string() : real.error().message));
  REQUIRE(real);
  const ModelConfig& c = real->skeleton.config;
  CHECK(c.n_layers == 5);
  CHECK(c.hidden == 4096);
  CHECK(c.n_experts == 288);
  CHECK(c.top_k == 8);
  CHECK(c.moe_inter == 2048);
  CHECK(c.dense_inter == 12288);
  CHECK(c.q_lora == 1536);
  CHECK(c.kv_lora == 512);
  CHECK(c.qk_nope == 256);
  CHECK(c.qk_rope == 0);
  CHECK(c.v_head == 256);
  CHECK(c.kda_heads == 64);
  CHECK(c.kda_dim == 128);
  CHECK(c.hc_mult == 4);
  CHECK(c.swiglu_limit == 10.0f);
  CHECK(c.first_dense == 3);
  std::string layout;
  for (int l = 0; l < c.n_layers; ++l) layout += c.is_kda(l) ? 'K' : 'M';
  CHECK(layout == "KKKMK");  // --layers cut layer_types and kda_layers alike
  CHECK(real->skeleton.config_json["layer_types"].size() == 5);
  CHECK(real->skeleton.config_json["mlp_layer_types"].size() == 5);
}

}  // namespace waste

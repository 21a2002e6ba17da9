// config.json normalisation: K3's nested text_config flattened with _outer and the prefix;
// DeepSeek-V3 keys and MoE names mapped; MTP layers and companions dropped from the trunk.
#include <catch2/catch.hpp>

#include "compute/convert/source_config.hpp"

using namespace waste;
using namespace waste::convert;
using json = nlohmann::json;

namespace {
json kimi_text() {
  return json::parse(R"({"architectures":["KimiLinearForCausalLM"],"num_hidden_layers":2,"hidden_size":64,
    "vocab_size":100,"first_k_dense_replace":1,"intermediate_size":128,"moe_intermediate_size":32,"num_experts":4,
    "num_experts_per_token":2,"num_attention_heads":2,"qk_nope_head_dim":8,"qk_rope_head_dim":8,"v_head_dim":8,
    "kv_lora_rank":16,"linear_attn_config":{"num_heads":2,"head_dim":16,"short_conv_kernel_size":4,"kda_layers":[1]}})");
}
}  // namespace

TEST_CASE("a nested text_config is flattened with the outer keys under _outer and the K3 prefix", "[convert][config]") {
  json raw = {{"architectures", {"KimiK3ForConditionalGeneration"}}, {"vision_config", {{"hidden_size", 8}}},
              {"text_config", kimi_text()}};
  auto s = normalize_config(raw);
  REQUIRE(s.has_value());
  CHECK(s->prefix == "language_model.");
  CHECK(s->config["hidden_size"] == 64);
  CHECK(s->config["_outer"]["vision_config"]["hidden_size"] == 8);
  CHECK_FALSE(s->config["_outer"].contains("text_config"));
  CHECK(s->model.arch == "kimi-k3");
  CHECK(expert_weight_name(*s, 1, 3, 2) == "language_model.model.layers.1.block_sparse_moe.experts.3.w2.weight");
  CHECK(container_name(*s, "language_model.model.layers.1.block_sparse_moe.experts.3.w2.weight_packed") == std::nullopt);
  CHECK(container_name(*s, "vision_tower.x.weight") == "vision_tower.x.weight");
}

TEST_CASE("DeepSeek-V3 keys and MoE tensor names map to the Kimi ones, MTP layers are dropped", "[convert][config]") {
  json raw = kimi_text();
  raw.erase("num_experts");
  raw.erase("num_experts_per_token");
  raw.erase("linear_attn_config");
  raw["architectures"] = {"DeepseekV3ForCausalLM"};
  raw["model_type"] = "deepseek_v3";
  raw["n_routed_experts"] = 4;
  raw["num_experts_per_tok"] = 2;
  raw["n_shared_experts"] = 1;
  raw["norm_topk_prob"] = true;
  raw["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 64}}};
  auto s = normalize_config(raw);
  INFO((s ? std::string() : s.error().message));
  REQUIRE(s.has_value());
  CHECK(s->family == SourceFamily::deepseek);
  CHECK(s->model.n_experts == 4);
  CHECK(s->model.top_k == 2);
  CHECK(s->model.n_shared == 1);
  CHECK(s->model.renormalize);
  CHECK(s->fp8_block.rows == 128);
  CHECK(s->fp8_block.cols == 64);
  CHECK(expert_weight_name(*s, 1, 2, 0) == "model.layers.1.mlp.experts.2.gate_proj.weight");
  CHECK(container_name(*s, "model.layers.1.mlp.gate.weight") == "model.layers.1.block_sparse_moe.gate.weight");
  CHECK(container_name(*s, "model.layers.1.mlp.shared_experts.up_proj.weight") ==
        "model.layers.1.block_sparse_moe.shared_experts.up_proj.weight");
  CHECK(container_name(*s, "model.layers.0.mlp.gate_proj.weight") == "model.layers.0.mlp.gate_proj.weight");  // dense
  CHECK(container_name(*s, "model.layers.2.eh_proj.weight") == std::nullopt);  // MTP layer 2 of 2
  CHECK(container_name(*s, "model.layers.1.self_attn.q_a_proj.weight_scale_inv") == std::nullopt);
}

TEST_CASE("DeepSeek-V3 rotary and routing keys survive normalisation, norm_topk_prob false adds nothing",
          "[convert][config]") {
  json raw = kimi_text();
  raw.erase("num_experts");
  raw.erase("num_experts_per_token");
  raw.erase("linear_attn_config");
  raw.erase("moe_renormalize");
  raw.erase("mla_use_nope");
  raw["architectures"] = {"DeepseekV3ForCausalLM"};
  raw["model_type"] = "kimi_k2";
  raw["n_routed_experts"] = 4;
  raw["num_experts_per_tok"] = 2;
  raw["n_group"] = 2;
  raw["topk_group"] = 1;
  raw["norm_topk_prob"] = false;
  raw["rope_theta"] = 50000.0;
  raw["rope_scaling"] = {{"type", "yarn"}, {"factor", 32.0}, {"original_max_position_embeddings", 4096},
                         {"beta_fast", 1.0}, {"beta_slow", 1.0}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
  auto s = normalize_config(raw);
  INFO((s ? std::string() : s.error().message));
  REQUIRE(s.has_value());
  CHECK(s->model.rope.enabled);  // no mla_use_nope on a DeepSeek architecture: rotary
  CHECK(s->model.rope.theta == 50000.0);
  CHECK(s->model.rope.factor == 32.0);
  CHECK(s->model.grouped_routing());
  CHECK_FALSE(s->model.renormalize);
  CHECK_FALSE(s->config.contains("moe_renormalize"));  // v0 presence-tests it: never written as false
  CHECK(s->config["num_experts"] == 4);
  CHECK(s->config["n_routed_experts"] == 4);  // the checkpoint's own keys are kept

  raw["rope_scaling"]["type"] = "dynamic";
  auto refused = normalize_config(raw);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message.find("config.rope_scaling: type \"dynamic\" is not supported") != std::string::npos);
}

TEST_CASE("a malformed weight_block_size is refused", "[convert][config]") {
  json raw = kimi_text();
  raw["quantization_config"] = {{"weight_block_size", {128}}};
  auto s = normalize_config(raw);
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message == "config.json: quantization_config.weight_block_size must be two integers in 1..65536");
}

TEST_CASE("a config.json nested deeper than 64 levels is refused, not copied into a stack overflow",
          "[convert][config]") {
  // 200,000 levels under text_config: copying it (what normalisation does first) recursed once
  // per level and overflowed the stack (found by tests/fuzz/fuzz_source_config.cpp).
  const int depth = 200000;
  const std::string text = R"({"text_config": {"rope_scaling": )" + std::string(depth, '[') + std::string(depth, ']') + "}}";
  const auto raw = nlohmann::json::parse(text);
  auto deep = normalize_config(raw);
  REQUIRE_FALSE(deep);
  CHECK(deep.error().code == Errc::format);
  CHECK(deep.error().message == "config.json: nested deeper than 64 levels (the limit for a checkpoint config)");
  // 64 levels is still a config (it fails later, for what it lacks, not for its depth).
  const std::string at_limit = R"({"a": )" + std::string(63, '[') + std::string(63, ']') + "}";
  auto shallow = normalize_config(nlohmann::json::parse(at_limit));
  REQUIRE_FALSE(shallow);
  CHECK(shallow.error().message.find("nested deeper") == std::string::npos);
}

TEST_CASE("a model_type or norm_topk_prob of the wrong type is refused by name, not thrown", "[convert][config]") {
  // Found by tests/fuzz/fuzz_source_config.cpp: nlohmann's value() threw type_error out of
  // normalize_config (waste convert terminated).
  auto number = normalize_config(json::parse(R"({"architectures": ["DeepseekV3ForCausalLM"], "model_type": 8})"));
  REQUIRE_FALSE(number);
  CHECK(number.error().code == Errc::format);
  CHECK(number.error().message == "config.json: \"model_type\" is not a string");
  auto text = normalize_config(json::parse(R"({"model_type": "deepseek_v3", "norm_topk_prob": "yes"})"));
  REQUIRE_FALSE(text);
  CHECK(text.error().message == "config.json: \"norm_topk_prob\" is not a boolean");
}

namespace {
// GLM-5.3-Flash's config shape, cut to 4 layers (model-families.md §1.1).
json glm_raw() {
  return json::parse(R"({"architectures":["Glm5NextForConditionalGeneration"],"model_type":"glm5_next",
    "vision_config":{"hidden_size":8},"eos_token_id":[7,8,9],
    "quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]},
    "text_config":{"model_type":"glm5_next_text","num_hidden_layers":4,"hidden_size":64,"vocab_size":100,
    "intermediate_size":128,"moe_intermediate_size":32,"n_routed_experts":4,"num_experts_per_tok":2,
    "n_shared_experts":1,"norm_topk_prob":true,"num_attention_heads":2,"q_lora_rank":16,"kv_lora_rank":16,
    "qk_nope_head_dim":8,"qk_rope_head_dim":0,"v_head_dim":8,"num_nextn_predict_layers":1,
    "hc_mult":4,"hc_sinkhorn_iters":20,"hc_eps":1e-6,"swiglu_limit":10.0,"index_topk":8,"index_kpool":4,
    "index_n_heads":2,"index_head_dim":16,
    "layer_types":["linear_attention","linear_attention","linear_attention","deepseek_sparse_attention"],
    "mlp_layer_types":["dense","sparse","sparse","sparse"],
    "linear_attn_config":{"head_dim":16,"num_heads":2,"short_conv_kernel_size":4,"kda_layers":[0,1,2],
      "full_attn_layers":[3],"safe_gate":true,"lower_bound":-5.0}}})");
}
}  // namespace

TEST_CASE("a GLM config: prefix-less, kda_layers rebuilt 1-based from layer_types, eos list kept",
          "[convert][config][glm]") {
  auto s = normalize_config(glm_raw());
  INFO((s ? std::string() : s.error().message));
  REQUIRE(s.has_value());
  CHECK(s->family == SourceFamily::glm);
  CHECK(s->prefix.empty());
  CHECK(s->config["linear_attn_config"]["kda_layers"] == json({1, 2, 3}));
  CHECK(s->config["linear_attn_config"]["full_attn_layers"] == json({4}));
  CHECK(s->config["linear_attn_config"]["gate_lower_bound"] == -5.0);
  CHECK(s->config["first_k_dense_replace"] == 1);
  CHECK(s->config["num_experts"] == 4);
  CHECK(s->config["moe_renormalize"] == true);
  CHECK(s->config["eos_token_id"] == json({7, 8, 9}));  // from the outer config
  CHECK(s->config["hc_mult"] == 4);                     // GLM keys copied verbatim
  CHECK(s->config["index_kpool"] == 4);
  CHECK(s->config["swiglu_limit"] == 10.0);
  CHECK(s->config["_outer"]["vision_config"]["hidden_size"] == 8);
  CHECK(s->model.is_kda(0));
  CHECK(s->model.is_kda(2));
  CHECK_FALSE(s->model.is_kda(3));
  CHECK(s->model.first_dense == 1);
  CHECK(s->model.eos_token_id == 7);
  CHECK(s->model.eos_token_ids == std::vector<int>{7, 8, 9});
  CHECK(s->model.gate_lower_bound == -5.0f);
  CHECK(s->fp8_block.rows == 128);

  // Names: unnested, MoE mapped as for DeepSeek, mHC scales kept, MTP and vision left out.
  CHECK(expert_weight_name(*s, 2, 3, 1) == "model.language_model.layers.2.mlp.experts.3.up_proj.weight");
  CHECK(container_name(*s, "model.language_model.embed_tokens.weight") == "model.embed_tokens.weight");
  CHECK(container_name(*s, "model.language_model.norm.weight") == "model.norm.weight");
  CHECK(container_name(*s, "lm_head.weight") == "lm_head.weight");
  CHECK(container_name(*s, "model.language_model.layers.0.mlp.gate_proj.weight") == "model.layers.0.mlp.gate_proj.weight");
  CHECK(container_name(*s, "model.language_model.layers.1.mlp.gate.e_score_correction_bias") ==
        "model.layers.1.block_sparse_moe.gate.e_score_correction_bias");
  CHECK(container_name(*s, "model.language_model.layers.1.mlp.shared_experts.down_proj.weight") ==
        "model.layers.1.block_sparse_moe.shared_experts.down_proj.weight");
  CHECK(container_name(*s, "model.language_model.layers.1.hc_attn_scale") == "model.layers.1.hc_attn_scale");
  CHECK(container_name(*s, "model.language_model.layers.1.hc_ffn_scale") == "model.layers.1.hc_ffn_scale");
  CHECK(container_name(*s, "model.language_model.layers.1.hc_ffn_fn") == "model.layers.1.hc_ffn_fn");
  CHECK(container_name(*s, "model.language_model.layers.3.self_attn.indexer.wk.weight") ==
        "model.layers.3.self_attn.indexer.wk.weight");
  CHECK(container_name(*s, "model.language_model.layers.3.self_attn.q_b_proj.weight_scale_inv") == std::nullopt);
  CHECK(drop_reason(*s, "model.language_model.layers.4.eh_proj.weight") == DropReason::mtp);
  CHECK(container_name(*s, "model.language_model.layers.4.eh_proj.weight") == std::nullopt);
  CHECK(drop_reason(*s, "model.visual.blocks.0.attn.qkv.weight") == DropReason::vision);
  CHECK(container_name(*s, "model.visual.blocks.0.attn.qkv.weight") == std::nullopt);
  // An MXFP4 companion still is one.
  CHECK(drop_reason(*s, "model.language_model.layers.1.mlp.experts.0.up_proj.weight_scale") == DropReason::companion);
}

TEST_CASE("hazard: a GLM config whose 0-based kda_layers contradicts layer_types, or without layer_types, is refused",
          "[convert][config][glm]") {
  json raw = glm_raw();
  raw["text_config"]["linear_attn_config"]["kda_layers"] = {1, 2, 3};  // read as 1-based: wrong layers
  auto s = normalize_config(raw);
  REQUIRE_FALSE(s);
  CHECK(s.error().message == "config.json: linear_attn_config.kda_layers [1,2,3] (0-based) contradicts layer_types, "
                             "whose linear_attention layers are [0,1,2]");
  raw = glm_raw();
  raw["text_config"].erase("layer_types");
  s = normalize_config(raw);
  REQUIRE_FALSE(s);
  CHECK(s.error().message == "config.json: layer_types is missing (a GLM config's linear_attn_config.kda_layers is "
                             "0-based; the converter rebuilds the manifest's 1-based list from layer_types)");
  raw = glm_raw();
  raw["text_config"]["layer_types"][1] = "sliding_attention";
  s = normalize_config(raw);
  REQUIRE_FALSE(s);
  CHECK(s.error().message == "config.json: layer_types[1] \"sliding_attention\" is not linear_attention, "
                             "deepseek_sparse_attention or full_attention");
  raw = glm_raw();
  raw["text_config"]["mlp_layer_types"] = {"dense", "sparse", "dense", "sparse"};
  s = normalize_config(raw);
  REQUIRE_FALSE(s);
  CHECK(s.error().message == "config.json: mlp_layer_types[2] \"dense\" after the dense prefix: only a run of dense "
                             "layers followed by sparse ones is supported");
  raw = glm_raw();
  raw["text_config"]["first_k_dense_replace"] = 3;
  s = normalize_config(raw);
  REQUIRE_FALSE(s);
  CHECK(s.error().message == "config.json: first_k_dense_replace 3 contradicts mlp_layer_types (1 dense layers first)");
}

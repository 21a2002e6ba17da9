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

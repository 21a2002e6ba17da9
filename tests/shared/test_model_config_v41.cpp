// DeepSeek-V4.1-Flash's config keys (shared/container/model_config): CSA2 (head_dim, o_groups,
// o_lora_rank, sliding_window, compress_ratios, the kv / index source lists, the two-level
// candidate keys, compress_rope_theta), the router's sqrtsoftplus, attn_sink, hc_single_pass and
// the engram_* keys: read under their HF names, bounded with errors naming the key, cross-checked
// as the public engine's cfg_sane does, and written back by to_json.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/container/model_config.hpp"

namespace waste {
namespace {

using nlohmann::json;

// A six-layer V4.1 text config in the manifest's (normalised) key names: window-only layer 0,
// ratio 2 on layers 1..3 (source 1), ratio 1 on 4..5 (source 4), one draft layer's 0 at the end.
json tiny_v41() {
  return json::parse(R"({
    "architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41_text",
    "num_hidden_layers": 6, "hidden_size": 64, "vocab_size": 300, "num_attention_heads": 4,
    "head_dim": 32, "q_lora_rank": 24, "qk_rope_head_dim": 8, "o_groups": 2, "o_lora_rank": 16,
    "sliding_window": 8, "compress_ratios": [0, 2, 2, 2, 1, 1, 0],
    "kv_source_layer_ids": [1, 4], "index_source_layer_ids": [1, 3, 4, 5],
    "candidate_source_layer_id": 4, "candidate_topk_blocks": 4, "candidate_block_size": 2,
    "index_n_heads": 2, "index_head_dim": 16, "index_topk": 8,
    "num_experts": 8, "num_experts_per_token": 2, "moe_intermediate_size": 32, "num_shared_experts": 1,
    "scoring_func": "sqrtsoftplus", "moe_renormalize": true, "routed_scaling_factor": 1.5, "gate_temp": 1.0,
    "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "swiglu_limit": 10.0,
    "rms_norm_eps": 1e-20, "rope_theta": 10000, "compress_rope_theta": 160000,
    "rope_scaling": {"rope_type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1,
                     "original_max_position_embeddings": 64},
    "max_position_embeddings": 1024,
    "engram_layer_ids": [1, 3], "engram_num_embeddings": [1000, 1100], "engram_vocab_size": 50,
    "engram_max_ngram_size": 3, "engram_n_heads": 2, "engram_head_dim": 32, "engram_pad_id": 2,
    "engram_compressed_vocab_size": 200,
    "attn_sink": true, "hc_single_pass": true, "num_nextn_predict_layers": 1,
    "eos_token_id": 1, "bos_token_id": 0
  })");
}

std::string error_of(const json& j) {
  auto c = ModelConfig::from_json(j);
  REQUIRE_FALSE(c);
  return c.error().message;
}

json with(json j, const char* key, json value) {
  j[key] = std::move(value);
  return j;
}

}  // namespace

TEST_CASE("V4.1 config keys parse under their HF names and survive to_json", "[shared][container][v41]") {
  auto c = ModelConfig::from_json(tiny_v41());
  REQUIRE(c);
  CHECK(c->arch == "deepseek-v4.1");
  CHECK(c->is_deepseek_v41());
  CHECK(c->n_csa_layers() == 6);
  CHECK(c->n_mla_layers() == 0);
  CHECK(c->n_kda_layers() == 0);
  CHECK(c->is_csa(0));
  CHECK(c->head_dim == 32);
  CHECK(c->o_groups == 2);
  CHECK(c->o_lora_rank == 16);
  CHECK(c->sliding_window == 8);
  CHECK(c->compress_ratios == std::vector<int>{0, 2, 2, 2, 1, 1});  // the draft layer's 0 dropped
  CHECK(c->kv_source_layer_ids == std::vector<int>{1, 4});
  CHECK(c->index_source_layer_ids == std::vector<int>{1, 3, 4, 5});
  CHECK(c->candidate_source_layer_id == 4);
  CHECK(c->candidate_topk_blocks == 4);
  CHECK(c->candidate_block_size == 2);
  CHECK(c->compress_rope_theta == 160000.0);
  CHECK(c->scoring == RouterScoring::sqrtsoftplus);
  CHECK(c->attn_sink);
  CHECK(c->hc_single_pass);
  CHECK(c->hc_mult == 4);
  CHECK(c->rms_eps == 1e-20f);
  CHECK(c->rope.enabled);
  CHECK(c->rope.theta == 10000.0);
  CHECK(c->rope.yarn);
  CHECK(c->rope.factor == 16.0);
  CHECK(c->rope.attention_mscale() == 1.0);  // no mscale: the release's YaRN scales no attention
  CHECK(c->engram_layer_ids == std::vector<int>{1, 3});
  CHECK(c->engram_num_embeddings == std::vector<std::int64_t>{1000, 1100});
  CHECK(c->engram_vocab_size == 50);
  CHECK(c->engram_max_ngram_size == 3);
  CHECK(c->engram_n_heads == 2);
  CHECK(c->engram_head_dim == 32);
  CHECK(c->engram_pad_id == 2);
  CHECK(c->engram_compressed_vocab_size == 200);
  CHECK(c->uses_engram());
  CHECK(c->n_moe_layers() == 6);
  // Which compressed cache each layer reads.
  std::vector<int> src;
  for (int l = 0; l < 6; ++l) src.push_back(c->kv_source_of(l));
  CHECK(src == std::vector<int>{-1, 1, 1, 1, 4, 4});

  const json back_json = c->to_json();
  CHECK(back_json["architectures"][0] == "DeepseekV41ForCausalLM");
  CHECK(back_json["scoring_func"] == "sqrtsoftplus");
  CHECK(back_json["compress_ratios"] == json({0, 2, 2, 2, 1, 1}));
  CHECK(back_json["attn_sink"] == true);
  auto back = ModelConfig::from_json(back_json);
  REQUIRE(back);
  CHECK(back->arch == "deepseek-v4.1");
  CHECK(back->attention == c->attention);
  CHECK(back->head_dim == 32);
  CHECK(back->o_groups == 2);
  CHECK(back->o_lora_rank == 16);
  CHECK(back->sliding_window == 8);
  CHECK(back->compress_ratios == c->compress_ratios);
  CHECK(back->kv_source_layer_ids == c->kv_source_layer_ids);
  CHECK(back->index_source_layer_ids == c->index_source_layer_ids);
  CHECK(back->candidate_source_layer_id == 4);
  CHECK(back->candidate_topk_blocks == 4);
  CHECK(back->candidate_block_size == 2);
  CHECK(back->compress_rope_theta == 160000.0);
  CHECK(back->scoring == RouterScoring::sqrtsoftplus);
  CHECK(back->attn_sink);
  CHECK(back->hc_single_pass);
  CHECK(back->engram_layer_ids == c->engram_layer_ids);
  CHECK(back->engram_num_embeddings == c->engram_num_embeddings);
  CHECK(back->engram_vocab_size == 50);
  CHECK(back->engram_max_ngram_size == 3);
  CHECK(back->engram_n_heads == 2);
  CHECK(back->engram_head_dim == 32);
  CHECK(back->engram_pad_id == 2);
  CHECK(back->engram_compressed_vocab_size == 200);
  CHECK(back->index_n_heads == 2);
  CHECK(back->index_topk == 8);
  CHECK(back->rope.yarn);
}

TEST_CASE("V4.1 config: nesting, model_type and the candidate default", "[shared][container][v41]") {
  // Nested under text_config, named only by model_type; errors then say config.text_config.
  json text = tiny_v41();
  text.erase("architectures");
  json outer = {{"model_type", "deepseek_v41"}, {"text_config", text}};
  auto c = ModelConfig::from_json(outer);
  REQUIRE(c);
  CHECK(c->arch == "deepseek-v4.1");
  CHECK(c->rope.enabled);  // model_type alone makes it DeepSeek-family rotary
  outer["text_config"]["o_groups"] = 3;
  CHECK(error_of(outer) == "config.text_config: o_groups 3 does not divide num_attention_heads 4");

  // Absent candidate_source_layer_id: the last kv source (the reference's default); -5 = off.
  json j = tiny_v41();
  j.erase("candidate_source_layer_id");
  auto d = ModelConfig::from_json(j);
  REQUIRE(d);
  CHECK(d->candidate_source_layer_id == 4);
  auto off = ModelConfig::from_json(with(tiny_v41(), "candidate_source_layer_id", -5));
  REQUIRE(off);
  CHECK(off->candidate_source_layer_id == -1);

  // The other score functions, and the public engine's key name score_func.
  json s = tiny_v41();
  s.erase("scoring_func");
  s["score_func"] = "softmax";
  auto sm = ModelConfig::from_json(s);
  REQUIRE(sm);
  CHECK(sm->scoring == RouterScoring::softmax);

  // transformers' to_dict writes layer_types: kv sources "shared_compressed_attention".
  json lt = with(tiny_v41(), "layer_types",
                 {"sliding_attention", "shared_compressed_attention", "sliding_attention", "sliding_attention",
                  "shared_compressed_attention", "sliding_attention"});
  CHECK(ModelConfig::from_json(lt));
  lt["layer_types"][2] = "shared_compressed_attention";
  CHECK(error_of(lt) ==
        "config.layer_types[2]: \"shared_compressed_attention\" where kv_source_layer_ids [1, 4] "
        "make it \"sliding_attention\"");
}

TEST_CASE("V4.1 config errors name the key", "[shared][container][v41]") {
  CHECK(error_of(with(tiny_v41(), "scoring_func", "relu")) ==
        "config.scoring_func: \"relu\" is not sigmoid, softmax or sqrtsoftplus");
  {
    json j = tiny_v41();
    j["score_func"] = "sigmoid";
    CHECK(error_of(j) == "config: scoring_func \"sqrtsoftplus\" and score_func \"sigmoid\" contradict each other");
  }
  {
    json j = tiny_v41();
    j.erase("attn_sink");
    CHECK(error_of(j) ==
          "config.attn_sink: missing (DeepSeek-V4.1 attention adds a per-head sink to every softmax; "
          "the converter sets it from the checkpoint's attn_sink)");
  }
  // A compressing layer's ratio must equal its kv source's.
  CHECK(error_of(with(tiny_v41(), "compress_ratios", {0, 2, 2, 1, 1, 1})) ==
        "config.compress_ratios[3]: layer 3 has ratio 1 but its kv source, layer 1, has ratio 2");
  CHECK(error_of(with(tiny_v41(), "compress_ratios", {2, 2, 2, 2, 1, 1})) ==
        "config.compress_ratios[0]: layer 0 compresses (ratio 2) but no kv_source_layer_ids entry is at or before it");
  CHECK(error_of(with(tiny_v41(), "compress_ratios", {0, 2, 2, 2, 1, 1, 2})) ==
        "config.compress_ratios[6]: 2 for a draft layer (draft layers are window-only: 0)");
  CHECK(error_of(with(tiny_v41(), "compress_ratios", {0, 2, 2, 2, 1})) ==
        "config.compress_ratios: 5 entries for 6 layers (and 1 draft layers)");
  CHECK(error_of(with(tiny_v41(), "compress_ratios", {0, 2, 2, 2, 1, -1})) ==
        "config.compress_ratios[5]: -1 is out of range 0..1024");
  CHECK(error_of(with(tiny_v41(), "compress_ratios", {0, 2, 2, 2, 1, "1"})) ==
        "config.compress_ratios[5]: expected an integer, found \"1\"");
  // Source lists: sorted, inside the layer count, compressing.
  CHECK(error_of(with(tiny_v41(), "kv_source_layer_ids", {4, 1})) ==
        "config.kv_source_layer_ids[1]: 1 is not above the entry before it (the list must be sorted, without repeats)");
  CHECK(error_of(with(tiny_v41(), "kv_source_layer_ids", {1, 6})) ==
        "config.kv_source_layer_ids[1]: 6 is out of range 0..5");
  CHECK(error_of(with(tiny_v41(), "kv_source_layer_ids", {0, 1, 4})) ==
        "config.kv_source_layer_ids[0]: layer 0 has compress ratio 0 (a kv source must compress)");
  CHECK(error_of(with(tiny_v41(), "kv_source_layer_ids", "1")) ==
        "config.kv_source_layer_ids: expected an array, found string");
  CHECK(error_of(with(tiny_v41(), "index_source_layer_ids", {0, 1, 4})) ==
        "config.index_source_layer_ids[0]: layer 0 has compress ratio 0 (an index source scores compressed positions)");
  CHECK(error_of(with(tiny_v41(), "index_source_layer_ids", {1, 3, 3})) ==
        "config.index_source_layer_ids[2]: 3 is not above the entry before it (the list must be sorted, without "
        "repeats)");
  // The candidate source must be an index source.
  CHECK(error_of(with(tiny_v41(), "candidate_source_layer_id", 2)) ==
        "config.candidate_source_layer_id: layer 2 is not among index_source_layer_ids [1, 3, 4, 5]");
  CHECK(error_of(with(tiny_v41(), "candidate_source_layer_id", 6)) ==
        "config.candidate_source_layer_id: 6 is out of range -1024..5");
  CHECK(error_of(with(tiny_v41(), "candidate_topk_blocks", 0)) ==
        "config.candidate_source_layer_id: the two-level top-k needs candidate_topk_blocks and candidate_block_size "
        ">= 1");
  // Engram.
  CHECK(error_of(with(tiny_v41(), "engram_layer_ids", {3, 1})) ==
        "config.engram_layer_ids[1]: 1 is not above the entry before it (the list must be sorted, without repeats)");
  CHECK(error_of(with(tiny_v41(), "engram_layer_ids", {1, 7})) == "config.engram_layer_ids[1]: 7 is out of range 0..5");
  CHECK(error_of(with(tiny_v41(), "engram_num_embeddings", {1000})) ==
        "config.engram_num_embeddings: 1 entries for 2 engram_layer_ids");
  CHECK(error_of(with(tiny_v41(), "engram_num_embeddings", {1000, 0})) ==
        "config.engram_num_embeddings[1]: 0 is out of range 1..1099511627776");
  CHECK(error_of(with(tiny_v41(), "engram_head_dim", 48)) ==
        "config.engram_head_dim: 48 is not a positive multiple of 32 (one scale per 32 columns)");
  CHECK(error_of(with(tiny_v41(), "engram_max_ngram_size", 1)) ==
        "config.engram_max_ngram_size: engram layers need n-grams of 2 or more");
  CHECK(error_of(with(tiny_v41(), "engram_max_ngram_size", 17)) ==
        "config.engram_max_ngram_size: 17 is out of range 0..16");
  CHECK(error_of(with(tiny_v41(), "engram_compressed_vocab_size", 301)) ==
        "config.engram_compressed_vocab_size: 301 is not in 1..vocab_size 300");
  CHECK(error_of(with(tiny_v41(), "engram_pad_id", 300)) ==
        "config.engram_pad_id: 300 is not a token id below vocab_size 300");
  CHECK(error_of(with(tiny_v41(), "engram_vocab_size", 1.5)) ==
        "config.engram_vocab_size: 1.5 is not an integer in 2..1099511627776");
  {
    json j = tiny_v41();
    j.erase("engram_layer_ids");
    CHECK(error_of(j) == "config.engram_num_embeddings: given without engram_layer_ids");
  }
  // Shape keys.
  CHECK(error_of(with(tiny_v41(), "head_dim", 0)) == "config: DeepSeek-V4.1 attention needs head_dim >= 1");
  CHECK(error_of(with(tiny_v41(), "head_dim", 65537)) == "config.head_dim: 65537 is out of range 0..65536");
  CHECK(error_of(with(tiny_v41(), "o_lora_rank", 0)) == "config: DeepSeek-V4.1 attention needs o_lora_rank >= 1");
  CHECK(error_of(with(tiny_v41(), "sliding_window", 0)) == "config: DeepSeek-V4.1 attention needs sliding_window >= 1");
  CHECK(error_of(with(tiny_v41(), "compress_rope_theta", 0.5)) ==
        "config.compress_rope_theta: 0.5 is not a number above 1");
  CHECK(error_of(with(tiny_v41(), "gate_temp", 0.0)) == "config.gate_temp: 0.000000 is not above 0");
  {
    json j = tiny_v41();
    j.erase("compress_ratios");
    j.erase("kv_source_layer_ids");
    j.erase("index_source_layer_ids");
    j.erase("candidate_source_layer_id");
    CHECK(error_of(j) == "config: DeepSeek-V4.1 attention needs compress_ratios (one per layer)");
  }
  {
    json j = tiny_v41();
    j.erase("hc_mult");
    CHECK(error_of(j) == "config: hc_single_pass needs hc_mult >= 1");
  }
  CHECK(error_of(with(tiny_v41(), "index_topk", 0)) ==
        "config: index_source_layer_ids needs index_n_heads, index_head_dim and index_topk >= 1");
}

}  // namespace waste

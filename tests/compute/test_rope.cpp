// Rotary embedding for the DeepSeek-V3 family (compute/forward/rope.*, shared/container/rope_config.*):
// YaRN frequencies and correction ranges on the published V3 / K2 values, the interleaved pairing,
// the softmax scale, mla_use_nope by value, and the refusals that name rope_scaling.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "compute/api/engine.hpp"
#include "compute/forward/rope.hpp"
#include "shared/container/model_config.hpp"
#include "shared/synth/synth.hpp"
#include "test_forward_fixtures.hpp"

using namespace waste;

namespace {

nlohmann::json mla_config() {
  return {{"num_hidden_layers", 1}, {"hidden_size", 64},        {"vocab_size", 100},
          {"num_attention_heads", 2}, {"intermediate_size", 64}, {"kv_lora_rank", 16},
          {"qk_nope_head_dim", 8},    {"qk_rope_head_dim", 64},  {"v_head_dim", 8}};
}

nlohmann::json v3_yarn() {
  return {{"type", "yarn"}, {"factor", 40}, {"original_max_position_embeddings", 4096}, {"beta_fast", 32},
          {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
}

Result<ModelConfig> parse(nlohmann::json extra) {
  nlohmann::json j = mla_config();
  j.update(extra);
  return ModelConfig::from_json(j);
}

RopeConfig v3_rope() {
  auto c = parse({{"architectures", {"DeepseekV3ForCausalLM"}}, {"rope_scaling", v3_yarn()}});
  REQUIRE(c);
  return c->rope;
}

}  // namespace

TEST_CASE("YaRN on DeepSeek-V3's values: range [10, 23], fast pairs kept, slow ones / 40", "[compute][rope]") {
  const RopeConfig r = v3_rope();
  REQUIRE(r.enabled);
  REQUIRE(r.yarn);
  const forward::YarnRange range = forward::yarn_range(r, 64);
  CHECK(range.low == 10.0);
  CHECK(range.high == 23.0);
  std::vector<double> f(32);
  forward::rope_inv_freq(r, 64, f.data());
  for (int i = 0; i < 32; ++i) {
    const double plain = std::pow(10000.0, -2.0 * i / 64.0);
    const double ramp = std::clamp((i - 10.0) / 13.0, 0.0, 1.0);
    CHECK(f[std::size_t(i)] == Approx(plain * (1 - ramp) + plain / 40.0 * ramp).epsilon(1e-14));
  }
  CHECK(f[10] == std::pow(10000.0, -20.0 / 64.0));
  // m = 0.1 ln 40 + 1 = 1.3688879; scale = m^2 / sqrt(192) = 0.13523378
  CHECK(r.attention_mscale() == Approx(1.3688879).epsilon(1e-7));
  ModelConfig c;
  c.qk_nope = 128;
  c.qk_rope = 64;
  c.rope = r;
  CHECK(forward::mla_softmax_scale(c) == Approx(0.13523378).epsilon(1e-6));
}

TEST_CASE("YaRN on Kimi-K2's values: a hard step between pairs 19 and 20", "[compute][rope]") {
  nlohmann::json rs = v3_yarn();
  rs["factor"] = 32.0;
  rs["beta_fast"] = 1.0;
  rs["beta_slow"] = 1.0;
  auto c = parse({{"architectures", {"DeepseekV3ForCausalLM"}}, {"model_type", "kimi_k2"}, {"rope_theta", 50000.0},
                  {"rope_scaling", rs}});
  REQUIRE(c);
  const forward::YarnRange range = forward::yarn_range(c->rope, 64);
  CHECK(range.low == 19.0);
  CHECK(range.high == 20.0);
  std::vector<double> f(32);
  forward::rope_inv_freq(c->rope, 64, f.data());
  CHECK(f[19] == std::pow(50000.0, -38.0 / 64.0));
  CHECK(f[20] == Approx(std::pow(50000.0, -40.0 / 64.0) / 32.0).epsilon(1e-15));
  CHECK(c->rope.attention_mscale() * c->rope.attention_mscale() == Approx(1.8132604).epsilon(1e-7));
}

TEST_CASE("Rotary pairs consecutive dims as complex numbers (DeepSeek-V3's convention)", "[compute][rope]") {
  float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  const double inv[2] = {0.5, 0.25};
  float cs[2], sn[2];
  forward::rope_angles(inv, 2, 3, cs, sn);
  forward::rope_rotate(x, 2, cs, sn);
  CHECK(x[0] == Approx(1.0 * std::cos(1.5) - 2.0 * std::sin(1.5)).epsilon(1e-6));
  CHECK(x[1] == Approx(1.0 * std::sin(1.5) + 2.0 * std::cos(1.5)).epsilon(1e-6));
  CHECK(x[2] == Approx(3.0 * std::cos(0.75) - 4.0 * std::sin(0.75)).epsilon(1e-6));
  CHECK(x[3] == Approx(3.0 * std::sin(0.75) + 4.0 * std::cos(0.75)).epsilon(1e-6));
  // Position 0 is the identity.
  float y[2] = {0.3f, -0.7f};
  forward::rope_angles(inv, 1, 0, cs, sn);
  forward::rope_rotate(y, 1, cs, sn);
  CHECK(y[0] == 0.3f);
  CHECK(y[1] == -0.7f);
}

TEST_CASE("mla_use_nope is read by value, absent, rotary follows the architecture", "[compute][rope]") {
  // Kimi-Linear / K3 style (and every v0 container): no key or true -> NoPE, the v0 scale.
  auto kimi = parse({{"architectures", {"KimiLinearForCausalLM"}}, {"rope_theta", 10000.0}});
  REQUIRE(kimi);
  CHECK_FALSE(kimi->rope.enabled);
  CHECK(forward::mla_softmax_scale(*kimi) == 1.0f / std::sqrt(72.0f));
  auto nope_true = parse({{"architectures", {"DeepseekV3ForCausalLM"}}, {"mla_use_nope", true}});
  REQUIRE(nope_true);
  CHECK_FALSE(nope_true->rope.enabled);
  // A DeepSeek architecture without the key rotates; so does any model with mla_use_nope false.
  auto ds = parse({{"architectures", {"DeepseekV3ForCausalLM"}}});
  REQUIRE(ds);
  CHECK(ds->rope.enabled);
  CHECK_FALSE(ds->rope.yarn);
  auto nope_false = parse({{"mla_use_nope", false}, {"rope_theta", 50000}});
  REQUIRE(nope_false);
  CHECK(nope_false->rope.enabled);
  CHECK(nope_false->rope.theta == 50000.0);
  CHECK(parse({{"mla_use_nope", "yes"}}).error().message == "config.mla_use_nope: expected a boolean, found string");
  // to_json round trip keeps the rotary.
  auto v3 = parse({{"architectures", {"DeepseekV3ForCausalLM"}}, {"rope_scaling", v3_yarn()}});
  REQUIRE(v3);
  auto again = ModelConfig::from_json(v3->to_json());
  REQUIRE(again);
  CHECK(again->rope.enabled);
  CHECK(again->rope.factor == 40.0);
  CHECK(again->rope.original_max_pos == 4096);
  CHECK(again->rope.attention_mscale() == v3->rope.attention_mscale());
}

TEST_CASE("rope_scaling of an unknown type or with contradicting fields is refused, naming rope_scaling",
          "[compute][rope]") {
  // Hazard: a model that needs rotary run with the wrong (or no) frequencies answers as if the
  // sequence were unordered, quietly. Every refusal names the key.
  auto refused = [](nlohmann::json rs) {
    auto c = parse({{"architectures", {"DeepseekV3ForCausalLM"}}, {"rope_scaling", rs}});
    REQUIRE_FALSE(c);
    return c.error().message;
  };
  CHECK(refused({{"type", "linear"}, {"factor", 2.0}}) ==
        "config.rope_scaling: type \"linear\" is not supported (only yarn or default)");
  CHECK(refused({{"factor", 2.0}}) == "config.rope_scaling: no type (or rope_type) given");
  CHECK(refused({{"type", "yarn"}, {"rope_type", "dynamic"}}) ==
        "config.rope_scaling: type \"yarn\" and rope_type \"dynamic\" contradict each other");
  nlohmann::json rs = v3_yarn();
  rs["mscale"] = 0.707;
  CHECK(refused(rs) == "config.rope_scaling: yarn mscale (0.707) and mscale_all_dim (1.0) must both be given and "
                       "equal (a cos/sin attention factor other than 1 is not supported)");
  rs = v3_yarn();
  rs.erase("mscale_all_dim");
  CHECK(refused(rs) == "config.rope_scaling: yarn mscale (1.0) and mscale_all_dim (absent) must both be given and "
                       "equal (a cos/sin attention factor other than 1 is not supported)");
  rs = v3_yarn();
  rs["beta_fast"] = 0.5;
  CHECK(refused(rs) == "config.rope_scaling: yarn beta_fast 0.5 and beta_slow 1.0 contradict each other (need "
                       "beta_fast >= beta_slow > 0)");
  rs = v3_yarn();
  rs["factor"] = 0.5;
  CHECK(refused(rs) == "config.rope_scaling: yarn factor 0.5 is below 1");
  rs = v3_yarn();
  rs.erase("original_max_position_embeddings");
  CHECK(refused(rs) == "config.rope_scaling: yarn needs original_max_position_embeddings, an integer in 1..2^30");
  CHECK(refused("yarn") == "config.rope_scaling: expected an object or null");
  // A NoPE model ignores rope_scaling, as the v0 engine does.
  auto k3 = parse({{"mla_use_nope", true}, {"rope_scaling", {{"type", "linear"}}}});
  CHECK(k3);
  // An odd rope width cannot be paired.
  auto odd = parse({{"mla_use_nope", false}, {"qk_rope_head_dim", 7}});
  REQUIRE_FALSE(odd);
  CHECK(odd.error().message == "config.qk_rope_head_dim: 7 must be even and at most 1024 for rotary");
}

namespace {

std::unique_ptr<Engine> open_engine(const std::filesystem::path& dir, int chunk, int lookahead) {
  EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.ctx_tokens = 64;
  o.prefill_chunk = chunk;
  o.lookahead = lookahead;
  auto engine = Engine::open(o);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return std::move(*engine);
}

}  // namespace

TEST_CASE("Rotary MLA: chunked prefill, decode and lookahead agree bit for bit on tiny-v3 / tiny-k2",
          "[compute][rope]") {
  // Every path (one token at a time, chunks, lookahead prefetch) rotates q and the cached k_r at
  // each token's own position; a path that used the chunk start or the cache length would differ.
  for (const char* preset : {"tiny-v3", "tiny-k2"}) {
    INFO(preset);
    const auto dir = test::synth_container(preset);
    auto seq = open_engine(dir, 1, 0);
    REQUIRE(seq->config().rope.enabled);
    auto chunked = open_engine(dir, 7, 0);
    auto ahead = open_engine(dir, 1, 4);
    std::vector<int> prompt;
    for (int i = 0; i < 23; ++i) prompt.push_back((i * 53 + 11) % seq->config().vocab);
    // Fed as decode steps (FeedKind::decode): with the default per-token rule a prompt's experts
    // take matrix products in every path, so a chunk of one would no longer go through the decode
    // step (step() and its lookahead) that this test compares the chunks with.
    auto a = seq->eval(prompt, {}, FeedKind::decode);
    auto b = chunked->eval(prompt, {}, FeedKind::decode);
    auto c = ahead->eval(prompt, {}, FeedKind::decode);
    REQUIRE(a);
    REQUIRE(b);
    REQUIRE(c);
    CHECK(std::memcmp(a->data(), b->data(), a->size() * sizeof(float)) == 0);
    CHECK(std::memcmp(a->data(), c->data(), a->size() * sizeof(float)) == 0);
  }
}

TEST_CASE("The deepseek-v3 and kimi-k2 presets carry the published shapes, rotary and routing",
          "[compute][rope]") {
  synth::SynthRequest request;
  request.preset = "deepseek-v3";
  request.layers = 4;
  auto v3 = synth::make_spec(request);  // pure: nothing is written
  INFO((v3 ? std::string() : v3.error().message));
  REQUIRE(v3);
  const ModelConfig& a = v3->skeleton.config;
  CHECK(a.n_layers == 4);
  CHECK(a.first_dense == 3);
  CHECK(a.n_moe_layers() == 1);
  CHECK(a.n_experts == 256);
  CHECK(a.n_group == 8);
  CHECK(a.topk_group == 4);
  CHECK(a.n_heads == 128);
  CHECK(a.n_mtp == 1);
  CHECK(a.rope.enabled);
  CHECK(a.rope.factor == 40.0);
  CHECK(forward::yarn_range(a.rope, a.qk_rope).high == 23.0);

  request.preset = "kimi-k2";
  request.layers = 2;
  auto k2 = synth::make_spec(request);
  REQUIRE(k2);
  const ModelConfig& b = k2->skeleton.config;
  CHECK(b.n_experts == 384);
  CHECK(b.n_heads == 64);
  CHECK_FALSE(b.grouped_routing());
  CHECK(b.routed_scale == 2.827f);
  CHECK(b.rope.theta == 50000.0);
  CHECK(b.rope.factor == 32.0);
  CHECK(b.n_mtp == 0);
}

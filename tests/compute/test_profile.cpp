// Per-stage profile: off costs nothing and stays zero; on, the stages add up to no more than
// the wall time and the call counts match layers x tokens; table and JSON carry the numbers.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/api/engine.hpp"
#include "compute/profile/profile.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

std::unique_ptr<Engine> open(const std::string& preset, bool profile, int chunk) {
  EngineOptions o;
  o.model = test::synth_container(preset);
  o.threads = 2;
  o.ctx_tokens = 64;
  o.profile = profile;
  o.prefill_chunk = chunk;
  o.cache_records = 8;
  auto engine = Engine::open(o);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return std::move(*engine);
}

using profile::Stage;

}  // namespace

TEST_CASE("Profile off stays zero", "[compute][profile]") {
  auto engine = open("tiny", false, 64);
  const std::vector<int> prompt = {1, 5, 9, 13};
  REQUIRE(engine->eval(prompt));
  const EngineProfile& p = engine->profile();
  CHECK(p.wall_seconds == 0);
  CHECK(p.tokens == 0);
  for (const auto& s : p.stages) {
    CHECK(s.calls == 0);
    CHECK(s.seconds == 0);
  }
}

TEST_CASE("Profile stages add up to at most the wall time and count layers x tokens", "[compute][profile]") {
  for (const char* preset : {"tiny", "tiny-k3"}) {
    for (int chunk : {1, 64}) {
      INFO(preset << ", chunk " << chunk);
      auto engine = open(preset, true, chunk);
      const ModelConfig& c = engine->config();
      const std::vector<int> prompt = {1, 5, 9, 13, 17, 21};
      GenerateParams params;
      params.max_tokens = 5;
      params.eos_token = -2;
      auto result = engine->generate(prompt, params);
      REQUIRE(result);
      const std::uint64_t tokens = prompt.size() + result->tokens.size();
      const std::uint64_t forward_calls = (chunk == 1 ? prompt.size() : 1) + result->tokens.size();
      const EngineProfile& p = engine->profile();
      CHECK(p.tokens == tokens);
      CHECK(p.forward_calls == forward_calls);
      CHECK(p[Stage::embed].calls == tokens);
      // Attention runs once per layer per forward call (a prefill chunk batches its tokens).
      CHECK(p[Stage::attn_kda].calls == std::uint64_t(c.n_kda_layers()) * forward_calls);
      CHECK(p[Stage::attn_mla].calls == std::uint64_t(c.n_mla_layers()) * forward_calls);
      CHECK(p[Stage::router].calls == std::uint64_t(c.n_moe_layers()) * tokens);
      CHECK(p[Stage::lm_head].calls == forward_calls);
      CHECK(p[Stage::sampling].calls == result->tokens.size());
      // One call per (token, expert) pair on the LUT path. Prompt tokens under the default per-token
      // rule (compute/forward/expert_batch.hpp) take one matrix product per distinct expert of a
      // pass instead: the same count at chunk 1, fewer at chunk 64 (at least top_k per layer and pass).
      const std::uint64_t pairs = std::uint64_t(c.n_moe_layers()) * tokens * std::uint64_t(c.top_k);
      if (chunk == 1 || engine->decode_matches_prompt()) {
        CHECK(p[Stage::expert_matmul].calls == pairs);
      } else {
        CHECK(p[Stage::expert_matmul].calls < pairs);
        CHECK(p[Stage::expert_matmul].calls >=
              std::uint64_t(c.n_moe_layers()) * std::uint64_t(c.top_k) * (result->tokens.size() + 1));
      }
      CHECK(p.wall_seconds > 0);
      CHECK(p.accounted_seconds() > 0);
      CHECK(p.accounted_seconds() <= p.wall_seconds * (1 + 1e-9));
      CHECK(p.wall_seconds <= result->prompt_seconds + result->generate_seconds);

      // Table and JSON show the same numbers.
      const std::string table = profile::format_profile_table(p);
      const auto json = nlohmann::json::parse(profile::profile_to_json(p));
      CHECK(json["tokens"].get<std::uint64_t>() == tokens);
      CHECK(json["wall_seconds"].get<double>() == p.wall_seconds);
      for (std::size_t i = 0; i < profile::kStageCount; ++i) {
        const std::string name(profile::stage_name(Stage(i)));
        INFO(name);
        CHECK(table.find(name) != std::string::npos);
        CHECK(json["stages"][name]["calls"].get<std::uint64_t>() == p.stages[i].calls);
        CHECK(json["stages"][name]["seconds"].get<double>() == p.stages[i].seconds);
      }

      engine->reset_profile();
      CHECK(engine->profile().tokens == 0);
      CHECK(engine->profile()[Stage::router].calls == 0);
    }
  }
}

TEST_CASE("Profile table lays out one line per stage", "[compute][profile]") {
  EngineProfile p;
  p[Stage::router] = {0.25, 4};
  p[Stage::io_wait] = {0.5, 2};
  p.wall_seconds = 1.0;
  p.tokens = 2;
  p.forward_calls = 2;
  const std::string table = profile::format_profile_table(p);
  CHECK(table.find("router                0.250000   25.0%          4    62.5000\n") != std::string::npos);
  CHECK(table.find("io_wait               0.500000   50.0%          2   250.0000\n") != std::string::npos);
  CHECK(table.find("wall                  1.000000  100.0%   tokens 2, forward calls 2\n") != std::string::npos);
  CHECK(p.accounted_seconds() == 0.75);
}

}  // namespace waste

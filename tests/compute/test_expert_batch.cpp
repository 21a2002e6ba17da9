// Prefill by matrix products (compute/forward/expert_batch): chunked prefill's logits stay within
// the bound the chunked-prefill test holds token-by-token feeding to (1e-4 absolute, same argmax)
// for VQ3R, VQ2R and VQ4P experts under the per-token rule (the default) and the count rule, and
// they do differ in their bits from the LUT path (so the path ran); VQ4P keeps the LUT path and
// its bits. Under the per-token rule a prompt's logits and state are the same bits whatever the
// prefill chunk, wherever the prompt is split (a state saved there and restored included). The
// WASTE_PREFILL_MATMUL parser names what it refuses.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "compute/api/engine.hpp"
#include "compute/forward/expert_batch.hpp"
#include "compute/session/session_file.hpp"
#include "int8_prefill_guard.hpp"
#include "lut_mode_guard.hpp"
#include "shared/synth/synth.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

// Restores the process-wide setting when a test ends, whatever it set.
struct MinTokensGuard {
  int saved = forward::expert_batch::min_tokens();
  ~MinTokensGuard() { forward::expert_batch::set_min_tokens(saved); }
};

std::unique_ptr<Engine> open(const std::filesystem::path& dir, int chunk) {
  EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.ctx_tokens = 96;
  o.prefill_chunk = chunk;
  o.lookahead = 0;
  auto engine = Engine::open(o);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return std::move(*engine);
}

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  float d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

int argmax(std::span<const float> v) { return int(std::max_element(v.begin(), v.end()) - v.begin()); }

}  // namespace

TEST_CASE("prefill by matrix products stays within 1e-4 of token-by-token logits, for VQ3R, VQ2R and VQ4P",
          "[compute][prefill]") {
  MinTokensGuard guard;
  // f32 trunk products: the experts' paths are compared at 1e-4 (int8_prefill_guard.hpp).
  test::Int8PrefillGuard int8(false);
  // Pinned to f32 tables: this holds the matrix products to the LUT path's exact f32 sums at 1e-4;
  // q16 tables (the default on AVX-512 VBMI) sit up to 2e-3 from them (test_lut_q16.cpp).
  test::LutModeGuard lut_mode(forward::LutMode::f32);
  std::vector<std::pair<std::string, std::filesystem::path>> containers{{"tiny", test::container_for("tiny")},
                                                                        {"tiny-k3", test::container_for("tiny-k3")}};
  for (const char* experts : {"vq3r", "vq2r", "vq4p"}) containers.emplace_back(experts, test::kl_shaped(experts));
  float worst = 0;
  for (const auto& [name, dir] : containers) {
    std::vector<int> prompt;
    auto seq = open(dir, 1);
    for (int i = 0; i < 41; ++i) prompt.push_back((i * 53 + 11) % seq->config().vocab);
    forward::expert_batch::set_min_tokens(0);
    auto a = seq->eval(prompt);
    REQUIRE(a);
    for (int chunk : {64, 16}) {
      forward::expert_batch::set_min_tokens(0);
      auto lut = open(dir, chunk);
      auto b = lut->eval(prompt);
      REQUIRE(b);
      for (int min_tokens : {forward::expert_batch::kPromptTokens, 1, 2}) {
        INFO(name << ", chunk " << chunk << ", min tokens " << min_tokens);
        forward::expert_batch::set_min_tokens(min_tokens);
        auto batched = open(dir, chunk);
        auto c = batched->eval(prompt);
        REQUIRE(c);
        const float diff = max_abs_diff(*a, *c);
        worst = std::max(worst, diff);
        CHECK(diff <= 1e-4f);
        CHECK(argmax(*a) == argmax(*c));
        if (name == "vq4p") {
          // VQ4P stays on the LUT path (int8 LUT numerics): token-by-token's bits.
          CHECK(std::memcmp(a->data(), c->data(), a->size() * sizeof(float)) == 0);
        } else {
          // Another summation order: the bits move (the LUT path gives token-by-token's bits).
          CHECK(std::memcmp(b->data(), c->data(), b->size() * sizeof(float)) != 0);
        }
        // The state left behind decodes alike.
        for (int step = 0; step < 4; ++step) {
          const int next[1] = {argmax(seq->logits())};
          REQUIRE(argmax(batched->logits()) == next[0]);
          auto sa = seq->eval(next);
          auto sc = batched->eval(next);
          REQUIRE(sa);
          REQUIRE(sc);
          CHECK(max_abs_diff(*sa, *sc) <= 1e-4f);
        }
        // Rewind seq for the next case: a fresh engine fed the prompt again.
        forward::expert_batch::set_min_tokens(0);
        seq = open(dir, 1);
        a = seq->eval(prompt);
        REQUIRE(a);
      }
    }
  }
  WARN("worst |logit difference| to token by token: " << worst);
}

TEST_CASE("Under the per-token rule a prompt gets the same bits at every prefill chunk and split point",
          "[compute][prefill]") {
  MinTokensGuard guard;
  // f32 trunk products: the experts' paths are compared at 1e-4 (int8_prefill_guard.hpp).
  test::Int8PrefillGuard int8(false);
  // Pinned to f32 tables: the end compares the LUT path with the matrix products at 1e-4 (see
  // the test above); the bits under the per-token rule do not depend on the mode.
  test::LutModeGuard lut_mode(forward::LutMode::f32);
  forward::expert_batch::set_min_tokens(forward::expert_batch::kPromptTokens);
  std::vector<std::pair<std::string, std::filesystem::path>> containers{{"tiny", test::container_for("tiny")},
                                                                        {"tiny-k3", test::container_for("tiny-k3")},
                                                                        {"tiny-glm", test::container_for("tiny-glm")}};
  for (const char* experts : {"vq3r", "vq4p"}) containers.emplace_back(experts, test::kl_shaped(experts));
  for (const auto& [name, dir] : containers) {
    for (const int length : {41, 90}) {
      INFO(name << ", a prompt of " << length << " tokens");
      // 41 tokens: chunks of 64 (one), 16 (16 + 16 + 9), 7 (5 x 7 + 6) and 1 (a one-token prompt
      // chunk, which without the per-token rule would be a decode step). 90 tokens: chunks of 64
      // (64 + 26) against 128 and 512 (one pass of 90, chunk buffers of 128 and 512 tokens with 64
      // LUT rows: VQ4P's 90 tokens on the LUT path run their MoE in groups of 64) and 16.
      auto whole = open(dir, 64);
      const ModelConfig& config = whole->config();
      std::vector<int> prompt;
      for (int i = 0; i < length; ++i) prompt.push_back((i * 53 + 11) % config.vocab);
      auto want = whole->eval(prompt);
      REQUIRE(want);
      const std::vector<float> want_logits(want->begin(), want->end());
      const std::vector<std::byte> want_state = session::encode(config, whole->run_state());
      // Decode steps after it, by LUT.
      std::vector<std::vector<float>> want_steps;
      std::vector<int> next_ids;
      for (int step = 0; step < 3; ++step) {
        const int next[1] = {argmax(whole->logits())};
        next_ids.push_back(next[0]);
        auto stepped = whole->eval(next);
        REQUIRE(stepped);
        want_steps.emplace_back(stepped->begin(), stepped->end());
      }
      auto same_after = [&](Engine& e) {
        CHECK(std::memcmp(e.logits().data(), want_logits.data(), want_logits.size() * sizeof(float)) == 0);
        CHECK(session::encode(config, e.run_state()) == want_state);
        for (int step = 0; step < 3; ++step) {
          const int next[1] = {next_ids[std::size_t(step)]};
          auto stepped = e.eval(next);
          REQUIRE(stepped);
          CHECK(std::memcmp(stepped->data(), want_steps[std::size_t(step)].data(),
                            want_logits.size() * sizeof(float)) == 0);
        }
      };
      for (int chunk : length == 41 ? std::vector<int>{16, 7, 1} : std::vector<int>{128, 512, 16}) {
        INFO("chunk " << chunk);
        auto e = open(dir, chunk);
        REQUIRE(e->eval(prompt, {}, FeedKind::prompt));
        same_after(*e);
      }
      // Split anywhere (a one-token piece included): the first part, then the rest, in one engine
      // and through a state saved at the split and restored into a fresh engine (a prefix cache's
      // snapshot at a boundary that is no multiple of the chunk).
      for (int split : length == 41 ? std::vector<int>{1, 5, 17, 40} : std::vector<int>{70}) {
        INFO("split at " << split);
        const std::span<const int> all(prompt);
        auto e = open(dir, 16);
        REQUIRE(e->eval(all.first(std::size_t(split)), {}, FeedKind::prompt));
        const std::vector<std::byte> saved = session::encode(config, e->run_state());
        REQUIRE(e->eval(all.subspan(std::size_t(split)), {}, FeedKind::prompt));
        same_after(*e);
        auto restored = open(dir, 64);
        REQUIRE(session::decode_into(saved, config, restored->run_state(), "snapshot"));
        REQUIRE(restored->eval(all.subspan(std::size_t(split)), {}, FeedKind::prompt));
        same_after(*restored);
      }
      // The path ran (VQ4P excepted, which keeps the LUT path): the LUT path alone gives other bits,
      // within the bound.
      forward::expert_batch::set_min_tokens(0);
      auto lut = open(dir, 64);
      auto lut_logits = lut->eval(prompt);
      REQUIRE(lut_logits);
      if (length > 64) {
        // Every token on the LUT path in a pass of 90 (more than the 64 LUT rows): the MoE runs in
        // groups, each token with token-at-a-time's bits, as in passes of 64.
        auto grouped = open(dir, 512);
        auto grouped_logits = grouped->eval(prompt);
        REQUIRE(grouped_logits);
        CHECK(std::memcmp(grouped_logits->data(), lut_logits->data(), lut_logits->size() * sizeof(float)) == 0);
        CHECK(session::encode(config, grouped->run_state()) == session::encode(config, lut->run_state()));
      }
      forward::expert_batch::set_min_tokens(forward::expert_batch::kPromptTokens);
      CHECK(max_abs_diff(*lut_logits, want_logits) <= 1e-4f);
      const bool same_as_lut = std::memcmp(lut_logits->data(), want_logits.data(), want_logits.size() * sizeof(float)) == 0;
      CHECK(same_as_lut == (name == "vq4p"));
      CHECK(whole->decode_matches_prompt() == (name == "vq4p"));
    }
  }
}

TEST_CASE("WASTE_PREFILL_MATMUL takes off, on or a token count and names what it refuses", "[compute][prefill]") {
  using forward::expert_batch::parse_min_tokens;
  CHECK(*parse_min_tokens("off", "WASTE_PREFILL_MATMUL") == 0);
  CHECK(*parse_min_tokens("on", "WASTE_PREFILL_MATMUL") == forward::expert_batch::kPromptTokens);
  CHECK(*parse_min_tokens("3", "WASTE_PREFILL_MATMUL") == 3);
  CHECK(*parse_min_tokens("64", "WASTE_PREFILL_MATMUL") == 64);
  for (const char* bad : {"0", "65", "2x", "", "ON", "-1"}) {
    const auto parsed = parse_min_tokens(bad, "WASTE_PREFILL_MATMUL");
    REQUIRE_FALSE(parsed);
    CHECK(parsed.error().message ==
          std::string("WASTE_PREFILL_MATMUL: '") + bad + "' is not off, on or a token count in 1..64");
  }
}

}  // namespace waste

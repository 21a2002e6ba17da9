// The q16 LUT mode end to end (compute/forward/lut_mode.hpp): decode's logits with int16 tables
// stay within the documented bound of the f32 tables' (same argmax at every step of a greedy
// continuation) on every family's test container with 8-bit-index experts, the bits do move (the
// mode ran), and VQ4P containers keep their int8 path's bits whatever the mode.
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
#include "compute/forward/lut_mode.hpp"
#include "shared/synth/synth.hpp"
#include "int8_prefill_guard.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

struct ModeGuard {
  forward::LutMode mode = forward::lut_mode();
  int min_tokens = forward::expert_batch::min_tokens();
  ~ModeGuard() {
    forward::set_lut_mode(mode);
    forward::expert_batch::set_min_tokens(min_tokens);
  }
};

std::unique_ptr<Engine> open(const std::filesystem::path& dir) {
  EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.ctx_tokens = 96;
  o.prefill_chunk = 1;
  o.lookahead = 0;
  auto engine = Engine::open(o);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return std::move(*engine);
}

int argmax(std::span<const float> v) { return int(std::max_element(v.begin(), v.end()) - v.begin()); }

// Logits of a 24-token prompt fed one token at a time, then 8 greedy steps (ids from `follow`
// when given, so both modes are scored on the same continuation).
std::vector<std::vector<float>> run(const std::filesystem::path& dir, std::vector<int>* follow) {
  auto engine = open(dir);
  std::vector<std::vector<float>> out;
  for (int i = 0; i < 24; ++i) {
    const int id[1] = {(i * 53 + 11) % engine->config().vocab};
    auto l = engine->eval(id);
    REQUIRE(l);
    out.emplace_back(l->begin(), l->end());
  }
  for (int step = 0; step < 8; ++step) {
    int next = argmax(out.back());
    if (follow->size() > std::size_t(step)) next = (*follow)[std::size_t(step)];
    else follow->push_back(next);
    const int id[1] = {next};
    auto l = engine->eval(id);
    REQUIRE(l);
    out.emplace_back(l->begin(), l->end());
  }
  return out;
}

}  // namespace

TEST_CASE("q16 LUTs keep decode's logits within 2e-3 of f32 LUTs with the same argmax, and leave VQ4P alone",
          "[compute][q16]") {
  ModeGuard guard;
  test::Int8PrefillGuard int8(false);  // the LUTs' own difference, not an int8 rounding flip it sets off
  forward::expert_batch::set_min_tokens(0);  // every token by LUT
  std::vector<std::pair<std::string, std::filesystem::path>> containers{{"tiny", test::container_for("tiny")},
                                                                        {"tiny-k3", test::container_for("tiny-k3")},
                                                                        {"tiny-glm", test::container_for("tiny-glm")}};
  for (const char* experts : {"vq3r", "vq2r", "vq4p"}) containers.emplace_back(experts, test::kl_shaped(experts));
  float worst = 0;
  for (const auto& [name, dir] : containers) {
    INFO(name);
    std::vector<int> follow;
    forward::set_lut_mode(forward::LutMode::f32);
    const auto f32 = run(dir, &follow);
    forward::set_lut_mode(forward::LutMode::q16);
    const auto q16 = run(dir, &follow);
    REQUIRE(f32.size() == q16.size());
    bool moved = false;
    for (std::size_t t = 0; t < f32.size(); ++t) {
      float diff = 0;
      for (std::size_t i = 0; i < f32[t].size(); ++i) diff = std::max(diff, std::abs(f32[t][i] - q16[t][i]));
      INFO("position " << t);
      if (name == "vq4p") {
        REQUIRE(diff == 0.0f);
        continue;
      }
      worst = std::max(worst, diff);
      moved = moved || diff > 0;
      CHECK(diff <= 2e-3f);
      CHECK(argmax(f32[t]) == argmax(q16[t]));
    }
    if (name != "vq4p") CHECK(moved);
  }
  WARN("worst |logit difference| q16 vs f32 LUTs: " << worst);
}
}  // namespace waste

// The int8 trunk products in a real forward pass (WASTE_PREFILL_INT8, compute/forward/int8_mode.hpp):
// a prompt chunk's logits stay within a bound of the f32 path's (and do differ, so the path ran, on
// both threads), and decode steps keep the f32 path's bits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "compute/api/engine.hpp"
#include "compute/forward/int8_mode.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

struct Int8Mode {
  explicit Int8Mode(bool on) { forward::set_int8_prefill(on); }
  ~Int8Mode() { forward::set_int8_prefill(false); }
};

std::vector<float> logits_after(const std::filesystem::path& dir, bool int8, int chunk, int tokens) {
  Int8Mode mode(int8);
  EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.ctx_tokens = 96;
  o.prefill_chunk = chunk;
  o.lookahead = 0;
  auto engine = Engine::open(o);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  std::vector<int> prompt;
  for (int i = 0; i < tokens; ++i) prompt.push_back((i * 53 + 11) % (*engine)->config().vocab);
  auto out = (*engine)->eval(prompt);
  REQUIRE(out);
  return std::vector<float>(out->begin(), out->end());
}

}  // namespace

TEST_CASE("int8 prefill: a prompt's logits stay near the f32 path's, both threads' rows",
          "[compute][prefill]") {
  // Random-weight models amplify the activations' rounding more than a trained one (kjv-mini: max
  // |logit diff| 0.87 with perplexity -0.013%, docs/QUALITY.md); measured here 1.0%, 1.5% and 14% of
  // the logit range. A worker thread reading no activations (an empty buffer) moved them by >100%.
  const struct {
    const char* preset;
    float bound;  // share of the f32 logits' range
  } cases[] = {{"tiny", 0.03f}, {"tiny-glm", 0.045f}, {"kl-shaped", 0.3f}};
  for (const auto& [preset, bound] : cases) {
    INFO(preset);
    const auto dir = test::container_for(preset);
    const auto f32 = logits_after(dir, false, 64, 41);
    const auto i8 = logits_after(dir, true, 64, 41);
    REQUIRE(f32.size() == i8.size());
    float diff = 0.0f, lo = f32[0], hi = f32[0];
    for (std::size_t i = 0; i < f32.size(); ++i) {
      diff = std::max(diff, std::abs(f32[i] - i8[i]));
      lo = std::min(lo, f32[i]);
      hi = std::max(hi, f32[i]);
    }
    INFO("max |diff| " << diff << ", logit range " << hi - lo);
    CHECK(diff > 0.0f);                  // the int8 path ran
    CHECK(diff <= bound * (hi - lo));    // and stayed close
  }
}

TEST_CASE("int8 prefill: token-at-a-time feeding keeps the f32 bits", "[compute][prefill]") {
  const auto dir = test::container_for("tiny");
  const auto f32 = logits_after(dir, false, 1, 20);
  const auto i8 = logits_after(dir, true, 1, 20);
  REQUIRE(f32.size() == i8.size());
  CHECK(std::memcmp(f32.data(), i8.data(), f32.size() * sizeof(float)) == 0);
}

}  // namespace waste

// Presence / frequency penalties in compute/sampling against a scalar reference: the same
// Sampler without penalties fed logits penalized by hand picks the same token at every step,
// with the same RNG draws.
#include <catch2/catch.hpp>

#include <vector>

#include "compute/sampling/sampler.hpp"

namespace waste {
namespace {

std::vector<float> logits_at(int step, int vocab) {
  std::vector<float> l(static_cast<std::size_t>(vocab));
  for (int i = 0; i < vocab; ++i) l[std::size_t(i)] = float(((i * 37 + step * 11) % 23)) * 0.125f - 1.0f;
  return l;
}

}  // namespace

TEST_CASE("Greedy with penalties: a worked example", "[serve][sampler]") {
  SamplingParams p;
  p.presence_penalty = 0.2f;
  Sampler s(p);
  const std::vector<float> l = {1.0f, 0.9f, 0.5f};
  CHECK(s.sample(l) == 0);  // 1.0 wins
  CHECK(s.sample(l) == 1);  // 0 is now 0.8 < 0.9
  CHECK(s.sample(l) == 0);  // 0.8 vs 1 at 0.7
  p.presence_penalty = 0;
  p.frequency_penalty = 0.3f;
  Sampler f(p);
  CHECK(f.sample(l) == 0);  // 1.0
  CHECK(f.sample(l) == 1);  // 0.7 vs 0.9
  CHECK(f.sample(l) == 0);  // 0.7 beats 0.6 and 0.5
  CHECK(f.sample(l) == 1);  // 0 is down to 0.4: 0.6 wins
}

TEST_CASE("Penalized sampling equals the plain sampler on hand-penalized logits", "[serve][sampler]") {
  constexpr int kVocab = 40;
  for (float temperature : {0.0f, 0.7f, 1.3f}) {
    for (int top_k : {0, 5}) {
      SamplingParams p;
      p.temperature = temperature;
      p.top_k = top_k;
      p.top_p = top_k ? 0.9f : 1.0f;
      p.seed = 1234;
      p.presence_penalty = 0.75f;
      p.frequency_penalty = -0.4f;
      SamplingParams plain = p;
      plain.presence_penalty = plain.frequency_penalty = 0;
      Sampler penalized(p), reference(plain);
      std::vector<int> counts(kVocab, 0);
      for (int step = 0; step < 64; ++step) {
        const std::vector<float> l = logits_at(step, kVocab);
        std::vector<float> by_hand = l;
        for (int t = 0; t < kVocab; ++t) {
          if (counts[std::size_t(t)] > 0) {
            by_hand[std::size_t(t)] -= p.presence_penalty + p.frequency_penalty * float(counts[std::size_t(t)]);
          }
        }
        const int expected = reference.sample(by_hand);
        INFO("T " << temperature << " top_k " << top_k << " step " << step);
        REQUIRE(penalized.sample(l) == expected);
        ++counts[std::size_t(expected)];
      }
      CHECK(penalized.rng_state() == reference.rng_state());
    }
  }
}

}  // namespace waste

// Sampler against §6.2. Expected picks were computed independently with numpy float32
// arithmetic (a separate implementation of the same rule), not by running this sampler.
#include <catch2/catch.hpp>

#include <array>
#include <set>
#include <vector>

#include "compute/sampling/sampler.hpp"

using waste::Sampler;
using waste::SamplingParams;

namespace {
// Softmax at T=0.7 gives ids 3,4,1,0,2,5 probabilities ~0.55,0.27,0.13,0.03,0.015,0.002.
const std::vector<float> kLogits = {1.0f, 2.0f, 0.5f, 3.0f, 2.5f, -1.0f};

std::vector<int> run(SamplingParams params, const std::vector<float>& logits, int n) {
  Sampler sampler(params);
  std::vector<int> picks;
  for (int i = 0; i < n; ++i) picks.push_back(sampler.sample(logits));
  return picks;
}
}  // namespace

TEST_CASE("greedy sampling picks the lowest id among tied maxima and draws nothing",
          "[compute][sampler]") {
  Sampler sampler(SamplingParams{});
  const std::uint64_t before = sampler.rng_state();
  REQUIRE(sampler.sample(std::vector<float>{1.0f, 5.0f, -2.0f, 5.0f, 4.0f}) == 1);
  REQUIRE(sampler.sample(std::vector<float>{-3.0f}) == 0);
  REQUIRE(sampler.rng_state() == before);
  REQUIRE(before == Sampler::kDefaultSeed);
}

TEST_CASE("the uniform draw is the LCG state rounded through float32", "[compute][sampler]") {
  std::uint64_t state = Sampler::kDefaultSeed;  // seed 0 means this state
  REQUIRE(Sampler::next_uniform(state) == 0.007680385839194059f);
  REQUIRE(Sampler::next_uniform(state) == 0.5309462547302246f);
  std::uint64_t seeded = 42;
  REQUIRE(Sampler::next_uniform(seeded) == 0.5682303309440613f);
  REQUIRE(Sampler(SamplingParams{.temperature = 1.0f, .seed = 0}).rng_state() ==
          0x853c49e6748fea9bULL);
}

TEST_CASE("seeded temperature sampling without truncation reproduces the reference picks",
          "[compute][sampler]") {
  // u = 0.568, 0.225, 0.413, 0.630, 0.680, 0.026: the last falls below P(id 0) = 0.032.
  const auto picks = run({.temperature = 0.7f, .top_p = 1.0f, .top_k = 0, .seed = 42}, kLogits, 6);
  REQUIRE(picks == std::vector<int>{3, 3, 3, 3, 3, 0});
  // Same seed, same sequence; the state persists across calls.
  REQUIRE(run({.temperature = 0.7f, .seed = 42}, kLogits, 6) == picks);
}

TEST_CASE("top-k keeps only the k best candidates, ranked by logit", "[compute][sampler]") {
  const auto picks = run({.temperature = 0.7f, .top_p = 1.0f, .top_k = 3, .seed = 42}, kLogits, 6);
  REQUIRE(picks == std::vector<int>{3, 3, 3, 4, 4, 3});

  // top_k = 1 is greedy in effect, whatever the draw.
  for (int id : run({.temperature = 2.0f, .top_k = 1, .seed = 7}, kLogits, 50)) REQUIRE(id == 3);
  // top_k = 2 over many draws: only ids 3 and 4, and both occur.
  const auto two = run({.temperature = 1.0f, .top_k = 2, .seed = 9}, kLogits, 200);
  REQUIRE(std::set<int>(two.begin(), two.end()) == std::set<int>{3, 4});
}

TEST_CASE("top-p cuts at the first candidate whose cumulative probability reaches top_p",
          "[compute][sampler]") {
  // With k = 3 the normalised weights are ~0.574, 0.279, 0.147: top_p 0.8 keeps two.
  const auto picks = run({.temperature = 0.7f, .top_p = 0.8f, .top_k = 3, .seed = 42}, kLogits, 6);
  REQUIRE(picks == std::vector<int>{3, 3, 3, 3, 4, 3});

  // top_p below the best probability keeps only the best.
  for (int id : run({.temperature = 0.7f, .top_p = 0.5f, .seed = 3}, kLogits, 50)) REQUIRE(id == 3);
  // Ties in the ranking go to the lower id.
  const std::vector<float> tied = {0.0f, 4.0f, 4.0f, 1.0f};
  for (int id : run({.temperature = 1.0f, .top_p = 0.1f, .seed = 5}, tied, 20)) REQUIRE(id == 1);
}

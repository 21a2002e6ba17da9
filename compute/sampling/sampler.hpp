// Token sampling exactly as waste-v0-reference.md §6.2 specifies, so a seeded run picks the same
// tokens as the C engine: 64-bit LCG, the uniform draw rounded to float32, float32 sums.
//   temperature <= 0: greedy argmax, ties -> lowest id, no draw.
//   otherwise: top-k (0 or >= vocab = off) then top-p (>= 1 = off) over exp((l - max) / T).
// Presence / frequency penalties (OpenAI's, an extension of §6.2; both 0 = the reference's bits):
// before either rule, l[t] -= presence * (c[t] > 0) + frequency * c[t], c[t] = how often this
// Sampler has already returned t (the generated tokens, not the prompt).
// A Sampler's RNG state and counts persist across the tokens of one generation. Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace waste {

struct SamplingParams {
  float temperature = 0;
  float top_p = 1;
  int top_k = 0;
  std::uint64_t seed = 0;  // 0 => kDefaultSeed
  float presence_penalty = 0;   // OpenAI range -2..2; 0 = off
  float frequency_penalty = 0;  // OpenAI range -2..2; 0 = off
  [[nodiscard]] bool penalized() const { return presence_penalty != 0.0f || frequency_penalty != 0.0f; }
};

class Sampler {
 public:
  static constexpr std::uint64_t kDefaultSeed = 0x853c49e6748fea9bULL;

  explicit Sampler(SamplingParams params);

  // logits must be non-empty. Allocation-free after the first call for a given vocab size.
  int sample(std::span<const float> logits);

  [[nodiscard]] const SamplingParams& params() const { return params_; }
  // The LCG state (for session save/restore) and the float32 uniform the next draw would give.
  [[nodiscard]] std::uint64_t rng_state() const { return state_; }
  void set_rng_state(std::uint64_t state) { state_ = state; }

  // One LCG step then u = float32((s >> 11) * 2^-53): the draw sample() makes per token.
  static float next_uniform(std::uint64_t& state);

 private:
  int sample_plain(std::span<const float> logits);
  int sample_truncated(std::span<const float> logits, int k, float max_logit, float u);

  SamplingParams params_;
  std::uint64_t state_;
  std::vector<int> order_;     // candidate ids, sorted by logit descending then id
  std::vector<float> weight_;  // exp((l - max) / T): of the first k candidates, or of every id (no truncation)
  std::vector<int> counts_;    // penalties only: times each id was returned
  std::vector<float> penalized_;  // penalties only: the logits after the penalties
};

}  // namespace waste

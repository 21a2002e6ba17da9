#include "compute/sampling/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "compute/kernels/kernels.hpp"

namespace waste {

Sampler::Sampler(SamplingParams params)
    : params_(params), state_(params.seed != 0 ? params.seed : kDefaultSeed) {}

float Sampler::next_uniform(std::uint64_t& state) {
  state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  // The double is rounded to float32 (it can round up to 1.0f): the reference does the same.
  return static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-53);
}

int Sampler::sample(std::span<const float> logits) {
  if (!params_.penalized()) return sample_plain(logits);
  // A copy, so the caller's logits (the engine's) stay as the model produced them.
  counts_.resize(logits.size(), 0);
  penalized_.assign(logits.begin(), logits.end());
  for (std::size_t t = 0; t < logits.size(); ++t) {
    if (counts_[t] == 0) continue;
    penalized_[t] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(counts_[t]);
  }
  const int chosen = sample_plain(penalized_);
  ++counts_[static_cast<std::size_t>(chosen)];
  return chosen;
}

int Sampler::sample_plain(std::span<const float> logits) {
  const int vocab = static_cast<int>(logits.size());
  if (params_.temperature <= 0.0f) {
    // max_element returns the first maximum: ties go to the lowest id.
    return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  const float u = next_uniform(state_);
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  const int k = (params_.top_k > 0 && params_.top_k < vocab) ? params_.top_k : vocab;
  if (k < vocab || params_.top_p < 1.0f) return sample_truncated(logits, k, max_logit, u);

  // Each weight is computed once and kept for the walk to the target (the same values the walk
  // would compute again): exp((logit - max) / temperature), the C library's expf bit for bit on
  // every ISA (kernels::exp_weights), summed in order.
  weight_.resize(static_cast<std::size_t>(vocab));
  kernels::exp_weights(kernels::active(), logits.data(), vocab, max_logit, params_.temperature, weight_.data());
  float total = 0.0f;
  for (int i = 0; i < vocab; ++i) total += weight_[i];
  const float target = u * total;
  float running = 0.0f;
  for (int i = 0; i < vocab; ++i) {
    running += weight_[i];
    if (running >= target) return i;
  }
  return vocab - 1;  // rounding left the running sum short of the target
}

int Sampler::sample_truncated(std::span<const float> logits, int k, float max_logit, float u) {
  const int vocab = static_cast<int>(logits.size());
  order_.resize(static_cast<std::size_t>(vocab));
  weight_.resize(static_cast<std::size_t>(k));
  std::iota(order_.begin(), order_.end(), 0);
  const auto by_logit = [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), by_logit);

  float total = 0.0f;
  for (int i = 0; i < k; ++i) {
    weight_[i] = std::exp((logits[order_[i]] - max_logit) / params_.temperature);
    total += weight_[i];
  }
  int kept = k;
  float cumulative = 0.0f;
  for (int i = 0; i < k; ++i) {
    cumulative += weight_[i] / total;
    if (cumulative >= params_.top_p) {
      kept = i + 1;
      break;
    }
  }
  const float target = u * cumulative;
  float running = 0.0f;
  for (int i = 0; i < kept; ++i) {
    running += weight_[i] / total;
    if (running >= target) return order_[i];
  }
  return order_[0];
}

}  // namespace waste

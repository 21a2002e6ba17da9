// -log softmax(logits)[target], in double so long texts do not drift: the per-token loss that
// `waste eval` and the C API's waste_eval sum into a perplexity.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>

namespace waste {

inline double token_nll(std::span<const float> logits, int target) {
  double max = logits[0];
  for (const float v : logits) max = std::max(max, double(v));
  double sum = 0;
  for (const float v : logits) sum += std::exp(double(v) - max);
  return -(double(logits[std::size_t(target)]) - max - std::log(sum));
}

}  // namespace waste

#include "compute/forward/router.hpp"

#include <algorithm>
#include <cmath>

#include "compute/forward/ops.hpp"

namespace waste::forward {

void router_scores(const ModelConfig& c, std::span<const float> bias, const float* logits, float* probs,
                   float* scored) {
  const int E = c.n_experts;
  if (c.scoring == RouterScoring::softmax) {
    float max_logit = logits[0];
    for (int e = 1; e < E; ++e) max_logit = std::max(max_logit, logits[e]);
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) {
      probs[e] = std::exp(logits[e] - max_logit);
      sum += probs[e];
    }
    for (int e = 0; e < E; ++e) probs[e] /= sum;
  } else {
    for (int e = 0; e < E; ++e) probs[e] = sigmoid(logits[e]);
  }
  for (int e = 0; e < E; ++e) scored[e] = bias.empty() ? probs[e] : probs[e] + bias[std::size_t(e)];
}

int router_rank(const ModelConfig& c, bool has_bias, const float* scored, int n, unsigned char* taken, int* ids) {
  const int E = c.n_experts;
  for (int e = 0; e < E; ++e) taken[e] = 0;
  int available = E;
  if (c.grouped_routing()) {
    const int G = c.n_group, per = E / G;
    float group_score[kMaxExpertGroups];
    bool kept[kMaxExpertGroups] = {};
    for (int g = 0; g < G; ++g) {
      const float* s = scored + std::int64_t(g) * per;
      float first = -INFINITY, second = -INFINITY;
      for (int i = 0; i < per; ++i) {
        if (s[i] > first) {
          second = first;
          first = s[i];
        } else if (s[i] > second) {
          second = s[i];
        }
      }
      group_score[g] = has_bias ? first + second : first;
    }
    for (int j = 0; j < c.topk_group; ++j) {
      int best = -1;
      for (int g = 0; g < G; ++g) {
        if (!kept[g] && (best < 0 || group_score[g] > group_score[best])) best = g;
      }
      kept[best] = true;
    }
    for (int g = 0; g < G; ++g) {
      if (kept[g]) continue;
      for (int i = 0; i < per; ++i) taken[std::int64_t(g) * per + i] = 1;
    }
    available = c.topk_group * per;
  }
  if (n > available) n = available;
  // n full scans keeping the first strict maximum: ties go to the lower id, order is kept.
  for (int j = 0; j < n; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      if (taken[e]) continue;
      if (best < 0 || scored[e] > scored[best]) best = e;
    }
    taken[best] = 1;
    ids[j] = best;
  }
  return n;
}

}  // namespace waste::forward

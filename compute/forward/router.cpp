#include "compute/forward/router.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "compute/forward/ops.hpp"

namespace waste::forward {

namespace {

// n full scans over the experts not yet taken, keeping the first strict maximum: ties go to the
// lower id, order is kept. n <= the experts not taken.
int scan_top(const float* scored, int E, int n, unsigned char* taken, int* ids) {
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

}  // namespace

float sqrt_softplus(float x) {
  // ops.hpp's softplus is torch's (beta 1, threshold 20): x itself above 20, else log1p(exp(x)).
  return std::sqrt(softplus(x));
}

void score_experts(RouterScoring f, const float* logits, int n, float temp, float* probs) {
  const float* x = logits;
  if (temp != 1.0f) {
    for (int e = 0; e < n; ++e) probs[e] = logits[e] / temp;
    x = probs;
  }
  switch (f) {
    case RouterScoring::softmax: {
      float max_logit = x[0];
      for (int e = 1; e < n; ++e) max_logit = std::max(max_logit, x[e]);
      float sum = 0.0f;
      for (int e = 0; e < n; ++e) {
        probs[e] = std::exp(x[e] - max_logit);
        sum += probs[e];
      }
      for (int e = 0; e < n; ++e) probs[e] /= sum;
      break;
    }
    case RouterScoring::sqrtsoftplus:
      for (int e = 0; e < n; ++e) probs[e] = sqrt_softplus(x[e]);
      break;
    case RouterScoring::sigmoid:
      for (int e = 0; e < n; ++e) probs[e] = sigmoid(x[e]);
      break;
  }
}

void router_scores(const ModelConfig& c, std::span<const float> bias, const float* logits, float* probs,
                   float* scored) {
  const int E = c.n_experts;
  score_experts(c.scoring, logits, E, 1.0f, probs);
  for (int e = 0; e < E; ++e) scored[e] = bias.empty() ? probs[e] : probs[e] + bias[std::size_t(e)];
}

int router_rank_flat(const float* scored, int E, int n, unsigned char* taken, int* ids) {
  for (int e = 0; e < E; ++e) taken[e] = 0;
  return scan_top(scored, E, std::min(n, E), taken, ids);
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
  return scan_top(scored, E, std::min(n, available), taken, ids);
}

void route_noaux(const NoauxRouter& r, const float* logits, std::span<const float> bias,
                 std::span<const float> bias_vl, bool image, const NoauxScratch& s, int* ids, float* weights) {
  const int E = r.n_experts, k = r.top_k;
  score_experts(r.score, logits, E, r.gate_temp, s.probs);
  const std::span<const float> b = image ? bias_vl : bias;
  for (int e = 0; e < E; ++e) s.scored[e] = b.empty() ? s.probs[e] : s.probs[e] + b[std::size_t(e)];
  router_rank_flat(s.scored, E, k, s.taken, ids);
  for (int j = 0; j < k; ++j) weights[j] = s.probs[ids[j]];
  if (r.renormalize && k > 1) {
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += weights[j];
    for (int j = 0; j < k; ++j) weights[j] /= (sum + 1e-20f);
  }
  for (int j = 0; j < k; ++j) weights[j] *= r.route_scale;
}

}  // namespace waste::forward

#include "ioserver/expert_cache/reuse_model.hpp"

#include <algorithm>
#include <cmath>

#include "ioserver/expert_cache/key_hash.hpp"

namespace waste {

ReuseModel::ReuseModel(std::uint32_t history_keys) : limit_(history_keys) {
  std::uint32_t cap = 16;
  while (cap < 2 * history_keys) cap <<= 1;
  history_.resize(cap);
  mask_ = cap - 1;
  decay_ = std::exp2(-1.0 / kHalfLifeTokens);
  full_ = 1.0 / (1.0 - decay_);
}

void ReuseModel::note_demand(int layer, int client) {
  Walk& w = walks_[std::size_t(client) % kMaxWalks];
  if (layer < w.layer) {
    // The token count is the busiest walk's: clients walking side by side are one round of
    // tokens, not one each (the decay is per round).
    ++w.tokens;
    epoch_ = std::max(epoch_, w.tokens);
  }
  w.layer = layer;
  w.seen = epoch_;
  layer_ = layer;
  n_layers_ = std::max(n_layers_, layer + 1);
}

ReuseState ReuseModel::used(ReuseState s) const {
  if (s.uses > 0 && s.epoch == epoch_) return s;
  const double kept = s.uses > 0 ? double(s.uses) * std::pow(decay_, double(epoch_ - s.epoch)) : 0.0;
  return ReuseState{float(kept + 1.0), epoch_};
}

int ReuseModel::distance(int layer) const {
  // Layer steps until some walk is at `layer` again: 1 for the next layer, n for the current one.
  const int n = n_layers_;
  int best = n;
  bool any = false;
  for (const Walk& w : walks_) {
    if (w.layer < 0 || epoch_ - w.seen > kWalkStaleTokens) continue;
    any = true;
    best = std::min(best, ((layer - w.layer - 1) % n + n) % n + 1);
  }
  return any ? best : ((layer - layer_ - 1) % n + n) % n + 1;
}

double ReuseModel::wait_for(double p, int layer) const {
  const int n = n_layers_;
  const int dist = distance(layer);
  if (p <= 0) return 1e30;
  return dist + n * (1.0 / std::min(p, 1.0) - 1.0);
}

double ReuseModel::expected_wait(const ReuseState& s, int layer) const {
  if (s.uses <= 0) return wait_for(0, layer);
  const double now = double(s.uses) * std::pow(decay_, double(epoch_ - s.epoch));
  return wait_for(now / full_, layer);
}

double ReuseModel::wait_after_chance(const ReuseState& s, int layer, double chance) const {
  const int n = n_layers_;
  const int dist = distance(layer);
  const double p = s.uses > 0 ? std::min(1.0, double(s.uses) * std::pow(decay_, double(epoch_ - s.epoch)) / full_) : 0.0;
  if (p <= 0) return 1e30;
  return dist + (1.0 - std::min(chance, 1.0)) * n / p;
}

double ReuseModel::hinted_wait(int layer) const { return wait_for(kHintConfidence, layer); }

std::uint32_t ReuseModel::home(std::uint32_t key) const {
  return key_bucket(key, mask_);
}

void ReuseModel::remember(std::uint32_t key, const ReuseState& s) {
  for (std::uint32_t i = home(key);; i = (i + 1) & mask_) {
    if (history_[i].key == key) {
      history_[i].state = s;
      return;
    }
    if (history_[i].key == kNoKey) {
      if (size_ >= limit_) return;  // full: forget rather than grow (no allocation after construction)
      history_[i] = Entry{key, s};
      ++size_;
      return;
    }
  }
}

ReuseState ReuseModel::recall(std::uint32_t key) const {
  for (std::uint32_t i = home(key);; i = (i + 1) & mask_) {
    if (history_[i].key == key) return history_[i].state;
    if (history_[i].key == kNoKey) return {};
  }
}

}  // namespace waste

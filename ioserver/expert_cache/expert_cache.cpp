#include "ioserver/expert_cache/expert_cache.hpp"

#include <algorithm>
#include <utility>

namespace waste {

using ipc::SlotState;

ExpertCache::ExpertCache(std::span<ipc::SlotShm> slots, CachePolicy policy, std::uint32_t history_keys)
    : slots_(slots),
      policy_(policy),
      index_(std::uint32_t(slots.size())),
      waiters_(slots.size(), 0),
      limit_(std::uint32_t(slots.size())),
      reuse_(history_keys),
      echo_(history_keys),
      slot_reuse_(slots.size()) {
  free_.reserve(slots.size());
  // Pop order = slot 0 first.
  for (std::size_t i = slots.size(); i-- > 0;) free_.push_back(std::uint32_t(i));
}

bool ExpertCache::evictable(std::uint32_t slot) const {
  const auto& s = slots_[slot];
  const auto st = SlotState(s.state.load(std::memory_order_relaxed));
  // Failed slots are not candidates: they return through the free list (mark_failed / unpin).
  return st == SlotState::ready && s.pin_mask.load(std::memory_order_relaxed) == 0 &&
         waiters_[slot] == 0;
}

bool ExpertCache::window_hint(std::uint32_t slot) const {
  const SlotReuse& r = slot_reuse_[slot];
  const int layer = ipc::key_layer(key(slot));
  return r.hinted && r.hint_walk_layer == layer && reuse_.walk_layer(r.hint_client) == layer &&
         reuse_.walk_tokens(r.hint_client) == r.hint_token;
}

double ExpertCache::prefetch_wait(int layer, int client) const {
  return layer == reuse_.walk_layer(client) ? 0.0 : reuse_.hinted_wait(layer);
}

void ExpertCache::note_hint(std::uint32_t slot, int client) {
  SlotReuse& r = slot_reuse_[slot];
  r.hinted = true;
  r.hint_client = client;
  r.hint_walk_layer = reuse_.walk_layer(client);
  r.hint_token = reuse_.walk_tokens(client);
}

double ExpertCache::wait_of(std::uint32_t slot) const {
  if (window_hint(slot)) return 0.0;
  const SlotReuse& r = slot_reuse_[slot];
  const int layer = ipc::key_layer(key(slot));
  double wait = reuse_.expected_wait(r.state, layer);
  if (policy_ == CachePolicy::echo && r.state.uses > 0) {
    // The echo's vote replaces the decayed count for the record's next chance only: a layer still
    // ahead is next wanted in this token, a passed one in the next.
    const auto vote = layer > reuse_.current_layer() ? echo_.vote_this_token(key(slot)) : echo_.vote_next_token(key(slot));
    if (vote) wait = reuse_.wait_after_chance(r.state, layer, *vote);
  }
  // A hint holds until the walk reaches its layer in the token it was given in.
  if (r.hinted && reuse_.walk_tokens(r.hint_client) == r.hint_token && reuse_.walk_layer(r.hint_client) < layer) {
    return std::min(wait, reuse_.hinted_wait(layer));
  }
  return wait;
}

bool ExpertCache::better_victim(std::uint32_t a, std::uint32_t b) const {
  const auto& sa = slots_[a];
  const auto& sb = slots_[b];
  const std::uint64_t la = sa.last_use.load(std::memory_order_relaxed);
  const std::uint64_t lb = sb.last_use.load(std::memory_order_relaxed);
  if (scored()) {
    // A window hint's wait is 0, below every other (each is at least one layer step).
    const double wa = wait_of(a);
    const double wb = wait_of(b);
    if (wa != wb) return wa > wb;
  } else if (const bool wa = window_hint(a), wb = window_hint(b); wa != wb) {
    return wb;  // the window goes last here too (LFRU would take it first: one hit)
  }
  if (policy_ == CachePolicy::lfru) {
    const std::uint32_t ha = sa.hits.load(std::memory_order_relaxed);
    const std::uint32_t hb = sb.hits.load(std::memory_order_relaxed);
    if (ha != hb) return ha < hb;
  }
  return la < lb;
}

void ExpertCache::forget_slot(std::uint32_t slot) {
  SlotReuse& r = slot_reuse_[slot];
  reuse_.remember(key(slot), r.state);
  r = SlotReuse{};
}

std::optional<std::uint32_t> ExpertCache::choose_victim(std::optional<double> admit_below) {
  if (!free_.empty() && in_use() < limit_) {
    const std::uint32_t s = free_.back();
    free_.pop_back();
    return s;
  }
  const auto n = std::uint32_t(slots_.size());
  const int samples = scored() ? kReuseSamples : kVictimSamples;
  std::optional<std::uint32_t> best;
  if (n <= std::uint32_t(samples)) {
    // Small caches: look at every slot, which is what the samples approximate anyway.
    for (std::uint32_t i = 0; i < n; ++i) {
      if (evictable(i) && (!best || better_victim(i, *best))) best = i;
    }
  } else {
    for (int k = 0; k < samples; ++k) {
      rng_ = rng_ * 1664525u + 1013904223u;
      const std::uint32_t i = rng_ % n;
      if (evictable(i) && (!best || better_victim(i, *best))) best = i;
    }
    // Every sample pinned: first evictable slot by linear scan.
    for (std::uint32_t i = 0; !best && i < n; ++i) {
      if (evictable(i)) best = i;
    }
  }
  // Admission of a prefetch: the victim must be expected to wait longer than the hinted record.
  if (best && admit_below && state(*best) == SlotState::ready && !(wait_of(*best) > *admit_below)) return std::nullopt;
  if (best) {
    if (state(*best) == SlotState::ready) {
      forget_slot(*best);
      index_.erase(key(*best));
      ++evictions_;
    }
  }
  return best;
}

ExpertCache::Lookup ExpertCache::lookup(std::uint32_t key, bool demand, int client) {
  const int layer = ipc::key_layer(key);
  if (demand) {
    ++clock_;
    reuse_.note_demand(layer, client);
    echo_.note_demand(key, reuse_.epoch());
  }
  if (const auto found = index_.find(key)) {
    auto& s = slots_[*found];
    if (demand) {
      s.last_use.store(clock_, std::memory_order_relaxed);
      s.hits.store(s.hits.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      slot_reuse_[*found].state = reuse_.used(slot_reuse_[*found].state);
      slot_reuse_[*found].hinted = false;
    } else if (layer == reuse_.walk_layer(client)) {
      // Already here and in the window being prefetched: it is kept like the ones that had to be read.
      note_hint(*found, client);
    }
    return {state(*found) == SlotState::ready ? Outcome::ready : Outcome::inflight, *found};
  }
  std::optional<double> admit_below;
  if (!demand && scored() && admission_) admit_below = prefetch_wait(layer, client);
  const auto victim = choose_victim(admit_below);
  if (!victim) return {demand || !admit_below ? Outcome::no_victim : Outcome::declined, 0};
  SlotReuse& r = slot_reuse_[*victim];
  r.state = reuse_.recall(key);
  if (demand) {
    r.state = reuse_.used(r.state);
  } else {
    note_hint(*victim, client);   // a window hint when `layer` is the walk's own
  }
  auto& s = slots_[*victim];
  s.key.store(key, std::memory_order_relaxed);
  s.hits.store(1, std::memory_order_relaxed);
  s.last_use.store(clock_, std::memory_order_relaxed);
  s.state.store(std::uint32_t(SlotState::inflight), std::memory_order_relaxed);
  index_.insert(key, *victim);
  return {Outcome::claimed, *victim};
}

ExpertCache::Lookup ExpertCache::demand(std::uint32_t key, int client) { return lookup(key, true, client); }
ExpertCache::Lookup ExpertCache::prefetch(std::uint32_t key, int client) { return lookup(key, false, client); }

std::optional<std::uint32_t> ExpertCache::claim_free(std::uint32_t key) {
  if (index_.find(key) || free_.empty() || in_use() >= limit_) return std::nullopt;
  const std::uint32_t slot = free_.back();
  free_.pop_back();
  slot_reuse_[slot] = SlotReuse{};
  slot_reuse_[slot].state = reuse_.recall(key);
  auto& s = slots_[slot];
  s.key.store(key, std::memory_order_relaxed);
  s.hits.store(0, std::memory_order_relaxed);
  s.last_use.store(0, std::memory_order_relaxed);  // never looks more recent than a demanded record
  s.state.store(std::uint32_t(SlotState::inflight), std::memory_order_relaxed);
  index_.insert(key, slot);
  return slot;
}

void ExpertCache::mark_ready(std::uint32_t slot) {
  slots_[slot].state.store(std::uint32_t(SlotState::ready), std::memory_order_relaxed);
}

void ExpertCache::set_limit(std::uint32_t limit) {
  limit_ = std::clamp<std::uint32_t>(limit, 1, std::uint32_t(slots_.size()));
  trim();
}

std::uint32_t ExpertCache::trim() {
  std::uint32_t evicted = 0;
  for (std::uint32_t i = 0; i < slots_.size() && in_use() > limit_; ++i) {
    if (!evictable(i)) continue;
    forget_slot(i);
    index_.erase(key(i));
    slots_[i].state.store(std::uint32_t(SlotState::empty), std::memory_order_relaxed);
    free_.push_back(i);
    ++evictions_;
    ++evicted;
  }
  return evicted;
}

void ExpertCache::mark_failed(std::uint32_t slot) {
  slot_reuse_[slot] = SlotReuse{};
  index_.erase(key(slot));
  slots_[slot].state.store(std::uint32_t(SlotState::failed), std::memory_order_relaxed);
  // Failed slots are reused before any eviction; pins on them are dropped by release-layer.
  if (slots_[slot].pin_mask.load(std::memory_order_relaxed) == 0) free_.push_back(slot);
}

void ExpertCache::pin(std::uint32_t slot, int client) {
  slots_[slot].pin_mask.fetch_or(std::uint64_t{1} << client, std::memory_order_relaxed);
}

bool ExpertCache::pinned_by(std::uint32_t slot, int client) const {
  return (slots_[slot].pin_mask.load(std::memory_order_relaxed) & (std::uint64_t{1} << client)) != 0;
}

void ExpertCache::unpin(std::uint32_t slot, int client) {
  const std::uint64_t before = slots_[slot].pin_mask.fetch_and(~(std::uint64_t{1} << client), std::memory_order_relaxed);
  const std::uint64_t after = before & ~(std::uint64_t{1} << client);
  // A failed slot whose last pin goes returns to the free list.
  if (before != 0 && after == 0 && state(slot) == SlotState::failed && waiters_[slot] == 0) free_.push_back(slot);
  if (after == 0 && in_use() > limit_) trim();
}

}  // namespace waste

// The ioserver's expert cache: which record sits in which arena slot, and which slot to evict.
// State lives in the shared slot table (SlotShm, so waste-ctl can look) plus daemon-private
// bookkeeping (index, free list, waiters). Not thread-safe: the daemon calls it under its cache
// mutex. Never allocates after construction.
//
// Slot life: empty -> inflight (claimed for a read) -> ready | failed; a ready slot becomes
// inflight again for another key when it is chosen as a victim. A slot is evictable when it is
// ready, nobody pins it and nobody waits on it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "ioserver/expert_cache/cache_policy.hpp"
#include "ioserver/expert_cache/reuse_model.hpp"
#include "ioserver/expert_cache/routing_echo.hpp"
#include "ioserver/expert_cache/slot_index.hpp"
#include "shared/ipc/shm_layout.hpp"

namespace waste {

class ExpertCache {
 public:
  static constexpr int kVictimSamples = 16;   // lru, lfru (the reference's sample)
  static constexpr int kReuseSamples = 64;    // reuse, echo: their score is worth a wider look (LEARNED.md)
  static constexpr std::uint32_t kHistoryKeys = 1u << 15;  // ghost history of the reuse policy

  // `slots` must be zero-initialised (all empty) and outlive the cache.
  ExpertCache(std::span<ipc::SlotShm> slots, CachePolicy policy, std::uint32_t history_keys = kHistoryKeys);

  enum class Outcome : std::uint8_t {
    ready,      // resident: `slot` holds the record
    inflight,   // a read is under way into `slot`
    claimed,    // was absent: `slot` is now inflight for this key and the caller must read it
    no_victim,  // absent and every slot is pinned, waited on or in flight
    declined,   // prefetch only (reuse, echo): every candidate victim is worth more than the hint
  };
  struct Lookup {
    Outcome outcome;
    std::uint32_t slot = 0;
  };

  // A demand access ticks the clock and, when resident, bumps frequency and recency.
  Lookup demand(std::uint32_t key, int client = 0);
  // A prefetch looks up or claims without touching frequency or recency of resident records.
  // Under the reuse and echo policies it is admitted only over a victim whose expected wait is longer than
  // the hinted record's (a speculative read never evicts what the policy values more).
  Lookup prefetch(std::uint32_t key, int client = 0);

  // The background fill: `key` (absent) takes a free slot, inflight, only while in_use() < limit();
  // never evicts and never touches the policy's clock. Nullopt when present or no slot is free.
  std::optional<std::uint32_t> claim_free(std::uint32_t key);

  // Where `key` sits (ready or in flight), without touching any policy state.
  [[nodiscard]] std::optional<std::uint32_t> find(std::uint32_t key) const { return index_.find(key); }

  void mark_ready(std::uint32_t slot);
  // The read failed: the key leaves the index, the slot shows `failed` until reused.
  void mark_failed(std::uint32_t slot);

  void pin(std::uint32_t slot, int client);
  [[nodiscard]] bool pinned_by(std::uint32_t slot, int client) const;
  void unpin(std::uint32_t slot, int client);
  // Waiters: clients owed a completion when the inflight read of `slot` ends.
  void add_waiter(std::uint32_t slot, int client) { waiters_[slot] |= std::uint64_t{1} << client; }
  std::uint64_t take_waiters(std::uint32_t slot) { return std::exchange(waiters_[slot], 0); }
  void drop_waiter(std::uint32_t slot, int client) { waiters_[slot] &= ~(std::uint64_t{1} << client); }
  [[nodiscard]] std::uint64_t waiters(std::uint32_t slot) const { return waiters_[slot]; }

  // At most `limit` slots may hold records (clamped to 1..n_slots). Lowering it evicts unpinned
  // ready records at once and the rest as they become evictable (trim); pinned, waited-on and
  // in-flight slots are never touched. While in_use() >= limit a miss can only reuse a victim.
  void set_limit(std::uint32_t limit);
  [[nodiscard]] std::uint32_t limit() const { return limit_; }
  // Slots not on the free list: holding a record, being read, or failed and still pinned.
  [[nodiscard]] std::uint32_t in_use() const { return std::uint32_t(slots_.size() - free_.size()); }
  // Evict evictable records while in_use() > limit(). Returns how many were evicted.
  std::uint32_t trim();

  void set_policy(CachePolicy policy) { policy_ = policy; }
  // Reuse and echo policies: whether a prefetch must beat its victim's expected wait (on by default; off
  // only to measure what admission is worth).
  void set_prefetch_admission(bool on) { admission_ = on; }
  [[nodiscard]] CachePolicy policy() const { return policy_; }
  [[nodiscard]] std::uint32_t n_slots() const { return std::uint32_t(slots_.size()); }
  [[nodiscard]] std::uint32_t used() const { return index_.size(); }
  [[nodiscard]] std::uint64_t evictions() const { return evictions_; }
  [[nodiscard]] ipc::SlotState state(std::uint32_t slot) const {
    return ipc::SlotState(slots_[slot].state.load(std::memory_order_relaxed));
  }
  [[nodiscard]] std::uint32_t key(std::uint32_t slot) const { return slots_[slot].key.load(std::memory_order_relaxed); }
  [[nodiscard]] bool evictable(std::uint32_t slot) const;

 private:
  Lookup lookup(std::uint32_t key, bool demand, int client);
  // `admit_below`: a victim must have a longer expected wait than this (reuse prefetch), or none.
  std::optional<std::uint32_t> choose_victim(std::optional<double> admit_below);
  [[nodiscard]] bool better_victim(std::uint32_t a, std::uint32_t b) const;  // a beats b
  [[nodiscard]] double wait_of(std::uint32_t slot) const;                    // reuse, echo: expected wait
  [[nodiscard]] bool scored() const { return policy_ == CachePolicy::reuse || policy_ == CachePolicy::echo; }
  void forget_slot(std::uint32_t slot);  // its record leaves: keep its reuse state as history

  std::span<ipc::SlotShm> slots_;
  CachePolicy policy_;
  SlotIndex index_;
  std::vector<std::uint32_t> free_;      // never-used or failed slots, used before any eviction
  std::vector<std::uint64_t> waiters_;   // per slot, bit per client
  std::uint64_t clock_ = 0;
  std::uint32_t rng_ = 0x9e3779b9u;
  std::uint64_t evictions_ = 0;
  std::uint32_t limit_ = 0;
  // Reuse policy state (daemon-private, kept under every policy so a switch starts informed).
  ReuseModel reuse_;
  RoutingEcho echo_;
  bool admission_ = true;
  struct SlotReuse {
    ReuseState state;
    int hint_client = 0;             // whose walk the hint came in,
    int hint_walk_layer = -1;        // the layer that walk was at,
    std::uint32_t hint_token = 0;    // and that walk's token
    bool hinted = false;  // prefetched, not demanded since: valued as the hint until its layer passes
  };
  // A hint given while the walk is at the record's own layer, still in that token and layer: a
  // prefill chunk's next window, demanded before the walk leaves the layer.
  [[nodiscard]] bool window_hint(std::uint32_t slot) const;
  // What `client`'s prefetch for `layer` is worth as an expected wait (0 for a window of the layer
  // its walk is at).
  [[nodiscard]] double prefetch_wait(int layer, int client) const;
  void note_hint(std::uint32_t slot, int client);  // prefetched by `client`, where its walk is now
  std::vector<SlotReuse> slot_reuse_;
};

}  // namespace waste

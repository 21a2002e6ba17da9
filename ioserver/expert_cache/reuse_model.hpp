// The `reuse` cache policy's estimate of when a record is next used (docs/design/daemon.md "Cache
// policy"; measured against LRU, LFRU and Belady's optimum in docs/LEARNED.md).
//
// A decode token walks the MoE layers upward, so a record of layer K is next wanted, at the
// earliest, when the walk reaches K again, and then with some per-token probability p. The
// expected wait in layer steps is dist(K) + n_layers * (1/p - 1); the victim is the record whose
// wait is longest (Belady's rule with estimates in place of the future). p is a decayed per-token
// use count (half-life kHalfLifeTokens), normalised by its steady-state maximum, and it is kept
// for records that were evicted (the ghost history), so a record read back after eviction is not
// mistaken for a new one: that history is what keeps hits below one working set.
//
// Tokens are counted from the demands, per client: one starts when a client's demand names a lower
// layer than its previous one (the rule the trace recorder uses); the decay counts rounds, the
// busiest client's tokens. With several clients a record's distance is to the nearest walk (one
// seen in the last kWalkStaleTokens rounds). The layer count is the highest layer seen, plus one. Daemon-private; not thread-safe (the cache mutex covers it); allocates only in the
// constructor.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace waste {

struct ReuseState {
  float uses = 0;            // decayed use count as of `epoch`
  std::uint32_t epoch = 0;   // token of the latest use (the decay reference)
};

class ReuseModel {
 public:
  static constexpr double kHalfLifeTokens = 4;
  // A prefetch hint counts as this probability of use when the hinted layer comes (admission).
  static constexpr double kHintConfidence = 0.5;

  // Remembers evicted records' state for up to `history_keys` distinct keys; beyond that, new
  // keys are not remembered (treated as never seen), never a failure.
  explicit ReuseModel(std::uint32_t history_keys);

  // Walks tracked apart (one per client slot of the daemon; `client` below is taken modulo this).
  static constexpr int kMaxWalks = 64;
  // A walk not seen for this many tokens no longer counts for the distance to a layer.
  static constexpr std::uint32_t kWalkStaleTokens = 2;

  // A demand for a record of `layer` by `client`: a token starts when that client's walk starts
  // over. Clients interleave their walks; each keeps its own position.
  void note_demand(int layer, int client = 0);
  // `s` with one use in the current token (a second use in the same token adds nothing).
  [[nodiscard]] ReuseState used(ReuseState s) const;
  // Expected layer steps until a record of `layer` in state `s` is next wanted (larger = better
  // victim); a record with no use history is the best victim of all.
  [[nodiscard]] double expected_wait(const ReuseState& s, int layer) const;
  // The same when the record's next chance is known to come with probability `chance` and later
  // ones with the decayed count's p: dist + (1 - chance) * n_layers / p.
  [[nodiscard]] double wait_after_chance(const ReuseState& s, int layer, double chance) const;
  // The same for a record the router predicts for `layer` (kHintConfidence as its p).
  [[nodiscard]] double hinted_wait(int layer) const;

  // Ghost history: the state an evicted record had, and what a claimed one starts from.
  void remember(std::uint32_t key, const ReuseState& s);
  [[nodiscard]] ReuseState recall(std::uint32_t key) const;

  [[nodiscard]] std::uint32_t epoch() const { return epoch_; }
  [[nodiscard]] int current_layer() const { return layer_; }
  // One client's walk: the layer of its last demand (-1 before any) and its tokens so far.
  [[nodiscard]] int walk_layer(int client) const { return walks_[std::size_t(client) % kMaxWalks].layer; }
  [[nodiscard]] std::uint32_t walk_tokens(int client) const { return walks_[std::size_t(client) % kMaxWalks].tokens; }

 private:
  [[nodiscard]] double wait_for(double p, int layer) const;
  [[nodiscard]] int distance(int layer) const;
  [[nodiscard]] std::uint32_t home(std::uint32_t key) const;

  static constexpr std::uint32_t kNoKey = 0xFFFFFFFFu;
  struct Entry {
    std::uint32_t key = kNoKey;
    ReuseState state;
  };
  std::vector<Entry> history_;  // open addressing, linear probing, never erased (overwritten)
  std::uint32_t mask_ = 0;
  std::uint32_t size_ = 0;
  std::uint32_t limit_ = 0;
  std::uint32_t epoch_ = 0;
  int layer_ = -1;  // the last demand's layer (whichever client)
  struct Walk {
    int layer = -1;           // -1: never seen
    std::uint32_t seen = 0;   // epoch of its last demand
    std::uint32_t tokens = 0; // its own tokens so far
  };
  std::array<Walk, kMaxWalks> walks_{};
  int n_layers_ = 1;
  double decay_ = 0;  // per-token factor 2^(-1/half-life)
  double full_ = 0;   // steady-state count of a record used every token: 1 / (1 - decay)
};

}  // namespace waste

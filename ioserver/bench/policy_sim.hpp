// Cache policy simulator: a real routing trace replayed through the daemon's own ExpertCache
// (no disk, no arena bytes: a plain slot table), as the daemon drives it for one client: each
// layer's experts are demanded and pinned together, reads land at once, the layer is released.
// Belady's offline optimum (evict the record used farthest in the future, the layer's own
// records pinned) is the bound. `waste bench --policy-sim` prints it; the policy tests assert it.
//
// Trace format (the workspace's routing traces, tests/data): one JSON object a line,
// {"tok": t, "layers": [[ids of MoE layer 0], [ids of MoE layer 1], ...]}.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ioserver/expert_cache/cache_policy.hpp"
#include "shared/result.hpp"

namespace waste {

struct RoutingTrace {
  std::vector<std::vector<std::vector<int>>> tokens;  // [token][layer] -> expert ids
  int n_layers = 0;
  int top_k = 0;      // most experts of one (token, layer)
  int n_experts = 0;  // highest id + 1
  // One token's expert reads across all layers: top_k x layers (waste-v0-reference.md §4.1).
  [[nodiscard]] std::uint32_t working_set() const { return std::uint32_t(top_k) * std::uint32_t(n_layers); }
};

// Errors name the line: "routing trace line 3: ...".
Result<RoutingTrace> parse_routing_trace(std::string_view text);

// Speculative prefetch simulated from the trace: after layer L's demands, `lookahead` ids of
// layer L+1 are hinted, of which the first `lookahead - wrong` of its real ids and `wrong` ids
// it does not use (a predictor of known precision).
struct SimHints {
  int lookahead = 0;
  int wrong = 0;
  bool admission = true;  // the reuse policy's prefetch admission (off: every hint may evict)
};

struct SimResult {
  std::uint64_t demands = 0;
  std::uint64_t hits = 0;            // demands found resident
  std::uint64_t prefetch_reads = 0;  // hinted records read
  std::uint64_t prefetch_declined = 0;
  [[nodiscard]] double hit_rate() const { return demands ? double(hits) / double(demands) : 0.0; }
  // Records read from disk: demand misses plus prefetch reads.
  [[nodiscard]] std::uint64_t reads() const { return demands - hits + prefetch_reads; }
};

// Several clients on one cache: the trace's tokens split into `clients` consecutive runs of
// tokens.size() / clients (the remainder unused), one per client. Their walks interleave one layer
// step at a time, client c starting c * n_layers / clients steps behind client 0 (spread through
// the walk, as independent decoders are), each step demanded and pinned by its client.
struct SimStep {
  int client = 0;
  int token = 0;
  int layer = 0;
};
[[nodiscard]] std::vector<SimStep> interleaved_walk(const RoutingTrace& trace, int clients);

// `capacity` slots (>= top_k, so one layer's pins fit); `clients` in 1..64.
Result<SimResult> simulate_policy(const RoutingTrace& trace, std::uint32_t capacity, CachePolicy policy,
                                  const SimHints& hints = {}, int clients = 1);
Result<SimResult> simulate_belady(const RoutingTrace& trace, std::uint32_t capacity, int clients = 1);

}  // namespace waste

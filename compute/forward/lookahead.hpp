// How many next-layer experts to prefetch per MoE layer in decode when the caller leaves it to
// the engine (EngineOptions::lookahead = -1). The rule and the numbers behind it are in
// docs/design/forward.md ("Router lookahead").
#pragma once

#include <cstdint>

namespace waste::forward {

// The reference's fixed width, the best it measured with a large cache on an 18-core laptop
// (lessons §1.2).
inline constexpr int kLookaheadWide = 6;
// On a small machine (<= 4 compute threads) the lookahead router and the reader threads take
// cores from compute: measured on 2 cores at a 3.3-working-set cache (docs/PERFORMANCE.md,
// "Lookahead width"), widths 2-4 gave 7.8-8.4 tok/s against 6.7 at 0, while 6 and 8 read
// 20-33% more and lost the gain.
inline constexpr int kLookaheadNarrow = 2;
inline constexpr int kSmallMachineThreads = 4;

// cache_records: what the source can hold (0 = unknown or no cache). A token's working set is
// W = n_moe_layers * top_k records; the model has n_moe_layers * n_experts records.
//   no cache, or below W/2      => 0 (a prefetch has nowhere to land / evicts records still needed)
//   the whole model fits        => 0 (once warm nothing is left to predict; from a cold start
//                                  widths 0 and 2 measured within noise of each other)
//   W/2 to W                    => half the width (at least 1)
//   W or more                   => min(top_k, 6), or min(top_k, 2) with <= 4 compute threads
constexpr int auto_lookahead(std::uint64_t cache_records, int n_moe_layers, int top_k, int n_experts,
                             int compute_threads) {
  if (cache_records == 0 || n_moe_layers <= 0 || top_k <= 0 || n_experts <= 0) return 0;
  const std::uint64_t working_set = std::uint64_t(n_moe_layers) * std::uint64_t(top_k);
  const std::uint64_t all_records = std::uint64_t(n_moe_layers) * std::uint64_t(n_experts);
  if (cache_records >= all_records) return 0;
  if (2 * cache_records < working_set) return 0;
  const int cap = compute_threads <= kSmallMachineThreads ? kLookaheadNarrow : kLookaheadWide;
  const int full = top_k < cap ? top_k : cap;
  if (cache_records < working_set) return full / 2 > 0 ? full / 2 : 1;
  return full;
}

}  // namespace waste::forward

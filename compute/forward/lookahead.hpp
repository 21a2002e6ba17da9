// How many next-layer experts to prefetch per MoE layer in decode when the caller leaves it to
// the engine (EngineOptions::lookahead = -1). The rule and the numbers behind it are in
// docs/design/forward.md ("Router lookahead").
#pragma once

#include <cstdint>

namespace waste::forward {

// The reference's fixed width, the best it measured with a large cache (lessons §1.2).
inline constexpr int kLookaheadFull = 6;

// cache_records: what the source can hold (0 = unknown or no cache). A token's working set is
// W = n_moe_layers * top_k records. No cache => 0 (a prefetch has nowhere to land); below W/2
// => 0 (measured: more bytes read, speculative records evicted before use); W/2 to W => half
// width; W or more => min(6, top_k) (measured faster at 1.0 W and 1.8 W).
constexpr int auto_lookahead(std::uint64_t cache_records, int n_moe_layers, int top_k) {
  if (cache_records == 0 || n_moe_layers <= 0 || top_k <= 0) return 0;
  const std::uint64_t working_set = std::uint64_t(n_moe_layers) * std::uint64_t(top_k);
  const int full = top_k < kLookaheadFull ? top_k : kLookaheadFull;
  if (2 * cache_records < working_set) return 0;
  if (cache_records < working_set) return full / 2 > 0 ? full / 2 : 1;
  return full;
}

}  // namespace waste::forward

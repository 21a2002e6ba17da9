// Prefill by matrix products (issue 26): an expert routed to several tokens of a prefill chunk
// is multiplied into all of them at once (KernelTable::rvq_matmul: each weight decoded from its
// RVQ indices into a register once per tile of tokens, then FMA), instead of one down-LUT build
// and three LUT applies per (token, expert) pair. The summation order differs from the LUT path,
// so logits differ from token-at-a-time feeding within a bound (1e-4 absolute, the chunked-prefill
// bound; tests/compute/test_expert_batch.cpp), not bit for bit.
//
// Selection: experts with at least min_tokens() users take this path (0 = never). The value is
// WASTE_PREFILL_MATMUL read once (off | on | a token count; on = kOnMinTokens; unset = off), or
// what set_min_tokens() stored last (tests).
//
// Off by default: whether a (token, expert) pair takes this path depends on how many tokens of
// the pass chose the expert, so with it on a token's bits depend on the other tokens of its pass:
// continuous batching (Engine::feed_batch) then no longer gives each sequence the bits it gets
// alone (tests/compute/test_batch.cpp), only logits within the bound. Measured: 1.3x prefill at
// 64-token chunks on the 8-layer Kimi-Linear shape (docs/PERFORMANCE.md, docs/LEARNED.md).
#pragma once

#include <span>
#include <string_view>

#include "compute/forward/forward.hpp"
#include "shared/result.hpp"

namespace waste::forward::expert_batch {

inline constexpr int kOnMinTokens = 2;  // beat 4 and 8 end to end (docs/PERFORMANCE.md)

int min_tokens();
void set_min_tokens(int n);
// "off" -> 0, "on" -> kOnMinTokens, "N" (1..64) -> N; anything else an error naming it.
Result<int> parse_min_tokens(std::string_view text, std::string_view what);
// Whether an expert with n_users tokens of a chunk takes this path. Never for VQ4P (packed 6-bit
// indices): its token-at-a-time path multiplies by an int8-quantised LUT, which moves logits by
// ~4e-2 from exact f32 products (kl-shaped test container), far outside the 1e-4 prefill bound;
// rvq_matmul handles VQ4P, but prefill stays on the LUT path so that it keeps decode's numerics.
inline bool wanted(const ExpertGeometry& g, int n_users) {
  const int t = min_tokens();
  return !g.packed6 && t > 0 && n_users >= t;
}

// For each user u in `users` (u = token * top_k + slot), ys + u * lat = the expert's output on
// the routed input xin + token * xin_stride. Timed as expert_matmul (one call per expert).
void run(const Exec& exec, const ModelConfig& c, const ExpertContext& ex, const ExpertView& view, const float* xin,
         std::int64_t xin_stride, std::span<const int> users, int top_k, float* ys, profile::Stopwatch& watch);

}  // namespace waste::forward::expert_batch

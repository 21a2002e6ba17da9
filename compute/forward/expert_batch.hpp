// Prefill by matrix products (issue 26): an expert routed to several tokens of a prefill chunk
// is multiplied into all of them at once (KernelTable::rvq_matmul: each weight decoded from its
// RVQ indices into a register once per tile of tokens, then FMA), instead of one down-LUT build
// and three LUT applies per (token, expert) pair. The summation order differs from the LUT path,
// so logits differ from token-at-a-time feeding within a bound (1e-4 absolute, the chunked-prefill
// bound; tests/compute/test_expert_batch.cpp), not bit for bit.
//
// Selection, WASTE_PREFILL_MATMUL read once (or what set_min_tokens() stored last, tests):
// - unset or "on" (kPromptTokens, the default): the per-token rule. Every prompt token's
//   (token, expert) pairs take this path whatever the number of tokens per expert, decode-step
//   tokens (Forward::Segment::prompt false) the LUT path. rvq_matmul gives a token the same bits
//   whatever else it is computed with (kernels.hpp), so a token's result depends only on whether
//   it is a prompt or a decode token: not on how the prompt is chunked, nor on the other
//   sequences of a batch, nor on the thread count. Prompt tokens need no gate/up LUTs.
// - "off" (0): the LUT path for every pair, token-at-a-time's bits for prompt tokens too.
// - "N" (1..64): the earlier count rule, for A/B: every pair of an expert routed to >= N tokens
//   of the pass, prompt or decode. A token's bits then depend on the other tokens of its pass
//   (continuous batching and prefill chunking change them within the bound, not bit for bit).
// Prompt logits differ from token-at-a-time feeding (the LUT path) within 1e-4 (the oracle
// tolerance): another summation order. Measured in docs/PERFORMANCE.md, docs/QUALITY.md.
#pragma once

#include <span>
#include <string_view>

#include "compute/forward/forward.hpp"
#include "compute/forward/scratch.hpp"
#include "shared/result.hpp"

namespace waste::forward::expert_batch {

inline constexpr int kPromptTokens = -1;  // the per-token rule ("on", the default)

// The setting: kPromptTokens, 0 (off) or a token count (the count rule).
int min_tokens();
void set_min_tokens(int n);
// "off" -> 0, "on" -> kPromptTokens, "N" (1..64) -> N; anything else an error naming it.
Result<int> parse_min_tokens(std::string_view text, std::string_view what);
// Whether this path is used at all for experts of geometry g. Never for VQ4P (packed 6-bit
// indices): its token-at-a-time path multiplies by an int8-quantised LUT, which moves logits by
// ~4e-2 from exact f32 products (kl-shaped test container), far outside the 1e-4 prefill bound;
// rvq_matmul handles VQ4P, but prefill stays on the LUT path so that it keeps decode's numerics.
inline bool usable(const ExpertGeometry& g) { return !g.packed6 && min_tokens() != 0; }
// The per-token rule is in force for experts of geometry g.
inline bool per_token(const ExpertGeometry& g) { return usable(g) && min_tokens() == kPromptTokens; }
// The count rule: whether an expert with n_users pairs in the pass takes this path for all of them.
inline bool wanted_by_count(const ExpertGeometry& g, int n_users) {
  const int t = min_tokens();
  return !g.packed6 && t > 0 && n_users >= t;
}

// For each user u in `users` (u = token * top_k + slot), ys + u * lat = the expert's output on
// the routed input xin + token * xin_stride. Working rows in p.mm_* (at most p.tokens users: a
// token routes to an expert once). Timed as expert_matmul (one call per expert).
void run(const Exec& exec, const ModelConfig& c, const ExpertContext& ex, const ExpertView& view, const float* xin,
         std::int64_t xin_stride, std::span<const int> users, int top_k, float* ys, PrefillMoeScratch& p,
         profile::Stopwatch& watch);

}  // namespace waste::forward::expert_batch

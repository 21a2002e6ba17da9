// `waste bench MODEL --positions 64,4000`: decode speed at chosen context positions (issue 20's
// long-context check). What grows with the position is the MLA latent cache each decode step
// attends over (KDA's state is the same size at every position), so a position's cost is set by
// how many cache rows there are, not by what they hold. Two ways to get there:
//   replicate (default)  prefill the bench prompt once, then fill rows prompt..P-2 with copies of
//                        the prompt's own rows (row t takes row t mod prompt) and decode from P-1;
//                        seconds per position instead of a prefill of P tokens.
//   prefill              feed P-1 real tokens (the bench prompt's id pattern extended); the
//                        honest state, at the cost of a full prefill per position.
// Each round restores a snapshot of the state, feeds one untimed token at P-1 (real logits at
// every position), then times `decode_tokens` greedy steps from P; positions are interleaved
// round by round so a machine whose load drifts biases them alike.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/api/engine.hpp"
#include "shared/result.hpp"

namespace waste::cli::bench {

enum class ContextFill { replicate, prefill };

struct LongContextArgs {
  std::vector<int> positions;  // decode starts at each (>= 2), ascending not required
  int prompt_tokens = 64;      // the real prefix (replicate copies its rows)
  int decode_tokens = 16;      // timed steps per position per round
  int rounds = 3;
  ContextFill fill = ContextFill::replicate;
};

struct PositionResult {
  int position = 0;
  std::vector<double> ms_per_token;     // one per round
  std::vector<double> mla_ms_per_token; // attn_mla stage per token, one per round (0 unless profiling)
  std::vector<int> tokens;              // greedy tokens of the first round
  bool rounds_agree = true;             // every round decoded the same tokens (the snapshot restores)
  [[nodiscard]] double best_ms() const;
  [[nodiscard]] double best_mla_ms() const;
};

struct LongContextReport {
  ContextFill fill = ContextFill::replicate;
  int prompt_tokens = 0;
  int decode_tokens = 0;
  std::vector<PositionResult> positions;
  // decode rate at the last position / at the first (best rounds): issue 20 asks >= 0.8 at 4000 vs 64
  [[nodiscard]] double rate_ratio() const;
};

// The bench workload's prompt ids: a fixed spread (no specials near the end of the vocabulary)
// so every run and every machine measures the same tokens; n of them, any n.
std::vector<int> bench_prompt_ids(int n, int vocab);

Result<std::vector<int>> parse_position_list(const std::string& text);
Result<LongContextReport> run_long_context(Engine& engine, const LongContextArgs& args, bool profiling);
nlohmann::json long_context_json(const LongContextReport& report);
void print_long_context(const LongContextReport& report);

}  // namespace waste::cli::bench

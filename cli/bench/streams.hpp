// `waste bench MODEL --streams 1,2,4,8`: decode of several sequences in lockstep through
// Engine::feed_batch, the engine's side of `waste serve`'s continuous batching without HTTP,
// sampling or a client beside it. For each count N: N fresh sequences each get a prompt (the
// bench prompt, rotated per stream so their routes differ), untimed; then `decode_tokens` passes,
// each feeding every sequence one decode step (its greedy token), timed. Reports the aggregate
// decode rate, the pass time, each stream's tokens and, with --profile, where a pass goes by stage. The counts run in
// the order given, on one engine, after an untimed run of the largest count (`warm`): stream i
// decodes the same tokens at every count, so that run reads every expert the timed ones route and
// a warm cache serves all of them alike.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/api/engine.hpp"
#include "shared/result.hpp"

namespace waste::cli::bench {

struct StreamsArgs {
  std::vector<int> counts;  // sequences per run, each >= 1
  int prompt_tokens = 64;
  int decode_tokens = 64;   // passes timed per count
  bool warm = true;         // an untimed run of the largest count first
};

struct StreamsRun {
  int streams = 0;
  int passes = 0;
  double seconds = 0;        // the timed passes
  EngineProfile profile;     // of the timed passes
  std::uint64_t expert_misses = 0;  // experts the timed passes had to read (0 once warm)
  std::vector<std::vector<int>> tokens;  // per stream, its greedy tokens in order
  [[nodiscard]] double aggregate_tokens_per_second() const { return seconds > 0 ? streams * passes / seconds : 0.0; }
  [[nodiscard]] double ms_per_pass() const { return passes > 0 ? 1e3 * seconds / passes : 0.0; }
};

struct StreamsReport {
  int prompt_tokens = 0;
  std::vector<StreamsRun> runs;
};

Result<std::vector<int>> parse_stream_counts(const std::string& text);
Result<StreamsReport> run_streams(Engine& engine, const StreamsArgs& args);
nlohmann::json streams_json(const StreamsReport& report, bool with_profile);
void print_streams(const StreamsReport& report, bool with_profile);

}  // namespace waste::cli::bench

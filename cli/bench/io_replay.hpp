// `waste bench --io-only`: replay an expert trace through an ExpertSource (the daemon's, by
// default) with no compute at all, to see what the I/O path alone can deliver and what a
// round trip costs when every record is already resident (the IPC cost per decode step).
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench/trace.hpp"
#include "compute/expert_source.hpp"

namespace waste::cli::bench {

struct LatencySummary {
  std::uint64_t count = 0;
  double mean_us = 0, p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
};
// Nearest-rank percentiles; sorts `samples`.
LatencySummary summarize(std::vector<double>& samples_us);

struct ReplayPass {
  std::uint64_t steps = 0;           // distinct trace steps replayed
  std::uint64_t layer_requests = 0;  // demand requests (one per MoE layer per step)
  std::uint64_t records = 0;         // records acquired
  std::uint64_t record_bytes = 0;    // records * record size (what compute would have read from memory)
  double seconds = 0;
  ExpertSourceStats experts;         // this pass's source counters
  LatencySummary record_latency;     // request issued -> that record acquired
  LatencySummary hit_layer;          // request -> every record acquired -> released, layers with no miss
  [[nodiscard]] double records_per_second() const { return seconds > 0 ? double(records) / seconds : 0; }
  [[nodiscard]] double disk_gb_per_second() const { return seconds > 0 ? double(experts.bytes_read) / 1e9 / seconds : 0; }
  // Disk bytes per trace step (per decoded token for a routing trace).
  [[nodiscard]] double disk_bytes_per_step() const { return steps ? double(experts.bytes_read) / double(steps) : 0; }
  [[nodiscard]] double hit_rate() const {
    const auto total = experts.hits + experts.misses;
    return total ? double(experts.hits) / double(total) : 0;
  }
};

// Replays every event of `trace` once per pass (prefetch events as prefetch calls). Errors carry
// the step and layer.
Result<std::vector<ReplayPass>> replay_trace(ExpertSource& source, const std::vector<TraceEvent>& trace,
                                             std::uint64_t record_bytes, int passes);

nlohmann::json replay_json(const ReplayPass& pass);
void print_replay_table(const std::vector<ReplayPass>& passes);

}  // namespace waste::cli::bench

// Expert traces: which expert sets a real run asked for, layer by layer, so the I/O path can be
// replayed alone (`waste bench --io-only --trace FILE`) without the compute in the way.
//
// Text format, one request per line:   KIND STEP LAYER ID,ID,...
//   KIND  d = demand request (pinned, waited for), p = speculative prefetch
//   STEP  forward call index (a decode token or a prefill chunk), counted by the recorder: a
//         request on a lower layer than the previous one starts a step (so a model with a
//         single MoE layer records every request as step 0)
// '#' starts a comment line. `waste bench --record-trace FILE` writes one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "compute/expert_source.hpp"
#include "ioserver/bench/policy_sim.hpp"
#include "shared/container/manifest.hpp"

namespace waste::cli::bench {

struct TraceEvent {
  bool prefetch = false;
  int step = 0;
  int layer = 0;
  std::vector<int> experts;
};

inline constexpr std::string_view kTraceHeader = "# waste expert trace v1: KIND STEP LAYER IDS (d demand, p prefetch)";

std::string format_trace(const std::vector<TraceEvent>& events);
// Errors name the line: "trace line 3: expected KIND STEP LAYER IDS".
Result<std::vector<TraceEvent>> parse_trace(std::string_view text);

// A routing trace (tests/data's JSON lines, ioserver/bench/policy_sim.hpp) as demand events:
// token t is step t, and the trace's MoE layer i is the container's i-th expert bank in layer
// order (Kimi-Linear: trace layer 0 is model layer 1, after the dense layer 0). Errors name the
// count or id that does not fit the container.
Result<std::vector<TraceEvent>> routing_trace_events(const RoutingTrace& trace, const Manifest& manifest);
// True when `text` is a routing trace (its first non-blank character opens a JSON object).
bool is_routing_trace(std::string_view text);

// Forwards every call to `inner` and records request/prefetch calls. A demand request on a
// layer below the previous one starts a new step (the forward pass walks layers upward).
class TracingExpertSource final : public ExpertSource {
 public:
  TracingExpertSource(std::unique_ptr<ExpertSource> inner, std::shared_ptr<std::vector<TraceEvent>> sink);
  Status request(int layer, std::span<const int> experts) override;
  Result<ExpertView> acquire(int layer, int expert) override;
  Result<ReadyExpert> acquire_next(int layer) override;
  void release_layer(int layer) override;
  void prefetch(int layer, std::span<const int> experts) override;
  [[nodiscard]] ExpertSourceStats stats() const override;
  [[nodiscard]] bool direct_io() const override;
  [[nodiscard]] std::uint64_t cache_capacity_records() const override;

 private:
  std::unique_ptr<ExpertSource> inner_;
  std::shared_ptr<std::vector<TraceEvent>> sink_;
  int step_ = -1;
  int last_layer_ = 1 << 30;
};

}  // namespace waste::cli::bench

// `waste bench MODEL --compute-only --floor`: the compute floor of one decoded token on this
// machine, measured in the same run as the step it is compared with (docs/PERFORMANCE.md, "The
// compute floor"). The floor assumes perfect use of every compute thread and no overheads:
//   trunk matrices     bytes read per token / streaming read bandwidth (all threads)
//   routed experts     top_k x MoE layers x (gate+up+down LUT applies at the measured lookup
//                      rate, the faster of whole experts per thread and rows split over the
//                      threads, index data DRAM-resident) + the LUT
//                      builds (gate/up once per layer, down once per expert) at the measured
//                      build rate divided by the threads
//   KDA recurrence     heads x KDA layers head steps at the measured rate, split over threads
//   MLA latent cache   bytes of the cache at the run's mean decode position / bandwidth
// Each rate comes from a micro-benchmark at the model's own shapes with the kernels the engine
// dispatched; nothing is taken from a table.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/profile/profile.hpp"
#include "shared/container/container.hpp"
#include "shared/container/model_config.hpp"
#include "shared/result.hpp"

namespace waste::cli::bench {

// Trunk bytes one decoded token reads, by the stage that reads them (the embedding row and
// tensors outside the text prefix, e.g. a vision tower, are not counted).
struct TrunkTraffic {
  std::uint64_t lm_head = 0;
  std::uint64_t attn_kda = 0;    // KDA layers' projections, convolutions, gates
  std::uint64_t attn_mla = 0;    // MLA layers' projections
  std::uint64_t shared_ffn = 0;  // dense FFN, shared experts, latent projections
  std::uint64_t router = 0;      // router weights and correction biases
  std::uint64_t other = 0;       // norms and the rest
  [[nodiscard]] std::uint64_t total() const {
    return lm_head + attn_kda + attn_mla + shared_ffn + router + other;
  }
};
TrunkTraffic trunk_traffic(const Manifest& manifest, const ModelConfig& config);

struct FloorRates {
  int threads = 0;
  std::string isa;
  // The expert tables the rates were measured with: "f32", "q16" (the LUT mode, as decode runs
  // VQ3R experts: compute/forward/lut_mode.hpp) or "int8" (VQ4P's own tables).
  std::string lut;
  double stream_gbs = 0;           // streaming read, all threads
  double lookups_per_ns = 0;       // RVQ table lookups, all threads (the faster spread, see above)
  double pair_apply_us = 0;        // one expert's gate+up+down applies (all threads' throughput)
  double gateup_build_us = 0;      // the gate and up LUTs of one layer, one thread
  double down_build_us = 0;        // one expert's down LUT, one thread
  double kda_head_step_us = 0;     // one KDA head step, one thread
};
// Micro-benchmarks at the shapes of `info` (expert geometry, KDA head dim) on `threads`
// threads with the active kernel table. Takes a few seconds; allocates ~300 MB while it runs.
Result<FloorRates> measure_floor_rates(const ContainerInfo& info, const ModelConfig& config, int threads);

struct FloorStage {
  std::string stage;
  double floor_ms = 0;
  double measured_ms = 0;
  std::string basis;  // how the floor was computed, in words
};

struct FloorReport {
  FloorRates rates;
  TrunkTraffic trunk;
  double mean_position = 0;  // the MLA cache length the floor assumes
  std::vector<FloorStage> stages;
  double floor_ms = 0;       // sum of the stages' floors
  double step_ms = 0;        // the measured decode step (wall per token)
  [[nodiscard]] double ratio() const { return step_ms > 0 ? floor_ms / step_ms : 0.0; }
};
// decode: the profiled decode phase (tokens > 0); prompt_tokens sets the mean MLA position.
FloorReport floor_report(const ContainerInfo& info, const ModelConfig& config, const FloorRates& rates,
                         const profile::EngineProfile& decode, int decode_tokens, double decode_seconds,
                         int prompt_tokens);

nlohmann::json floor_json(const FloorReport& report);
void print_floor(const FloorReport& report);

}  // namespace waste::cli::bench

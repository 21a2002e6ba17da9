// The engine API: open a container, feed tokens, read logits, generate. Used by the CLI, the
// server and the tests. An Engine owns one sequence (RunState); it is not thread-safe, and
// nothing in it calls exit(): every failure comes back as a Result with context.
//
// Expert records come from an ExpertSource: through waste-ioserver (EngineOptions::daemon), by
// default the daemon's own data plane inside this process (a private IoServer read through
// DaemonExpertSource, compute/io/in_process_plane.hpp), or one the caller supplies. The caller
// may also supply a Trunk built over a shared trunk image, so several engines share one copy.
// Front ends open through compute/api/engine_open.hpp (open_engine), which decides all of that
// from what their user asked for.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compute/engram/engram_rows.hpp"
#include "compute/engram/ngram_hash.hpp"
#include "compute/expert_source.hpp"
#include "compute/forward/ops.hpp"
#include "compute/model/run_state.hpp"
#include "compute/profile/profile.hpp"
#include "compute/sampling/sampler.hpp"
#include "shared/container/model_config.hpp"
#include "shared/container/trunk.hpp"
#include "shared/result.hpp"

namespace waste::forward {
struct ForwardTrace;
}

namespace waste {

class DaemonConnection;
struct ContainerInfo;

// Open through waste-ioserver: attach to the daemon serving the container, or start the
// container's shareable one (auto-exit after its last client; compute/io/daemon_connect.hpp).
// Records and the trunk then come from its shared memory, and the engine holds the connection.
struct DaemonOpenOptions {
  bool enabled = false;
  bool allow_spawn = true;
  std::vector<std::string> spawn_args;   // waste-ioserver flags for a daemon this open starts
  int linger_ms = -1;                    // its linger; -1 = default ($WASTE_LINGER_MS or 3 s)
  // Sequences this engine holds at once (new_sequence; `waste serve --parallel`): the daemon
  // admits their state (at ctx_tokens each) plus one scratch, shrinking its cache for it.
  int sequences = 1;
};

struct EngineOptions {
  std::filesystem::path model;     // the NAME.waste directory
  int threads = 0;                 // compute threads including the caller; 0 = hardware threads
  int ctx_tokens = 4096;           // positions per sequence (MLA latent cache length)
  bool verify_records = false;     // CRC-check every record read from disk
  bool direct_io = true;           // O_DIRECT for the banks when the filesystem allows it
  std::size_t cache_records = 0;   // in-process arena slots (0 = the minimum, 2 * top_k)
  int reader_threads = 2;          // in-process IoServer reader threads (1..64; 0 is taken as 1)
  int lookahead = -1;              // next-layer experts prefetched per MoE layer in decode:
                                   // -1 = automatic from the source's cache size, 0 = off, else 1..64
  int prefill_chunk = 64;          // tokens per chunked-prefill pass (1 = token by token), 1..512; the
                                   // chunk buffers hold max(this, 64) tokens (plan_memory's prefill_chunk)
  bool resident_experts = false;   // read every expert at open: decode then measures compute alone
  bool resident_embedding = false; // load the on-disk embed_tokens into memory at open (no disk read per
                                   // token); front ends set it from the budget (InProcessCache)
  bool profile = false;            // per-stage timings, see Engine::profile()
  // DeepSeek-V4.1's Engram rows requested ahead of the layer that reads them (a prompt's as soon
  // as its tokens are known, decode's at the step's start); off: read only when an Engram layer
  // asks (same logits, for A/B). nullopt: $WASTE_ENGRAM_READAHEAD (0/off, 1/on; anything else
  // refuses the open), on when unset (compute/engram/engram_read_meter.hpp).
  std::optional<bool> engram_readahead;
  DaemonOpenOptions daemon;        // enabled: read through waste-ioserver (ignored with a source)
};

struct GenerateParams {
  int max_tokens = 256;
  SamplingParams sampling;         // temperature 0 = greedy
  std::vector<int> stop_tokens;    // generation stops after feeding one of these
  int eos_token = -1;              // -1 = the config's eos_token_id (when > 0); -2 = none
  // Empty, or one pointer per prompt token: non-null = that position's embedding (hidden floats,
  // a media position's vision tower row) instead of embed_tokens. Must outlive generate().
  std::span<const float* const> prompt_embeddings;
};

// One generated token, reported after it has been fed through the model.
struct TokenEvent {
  int token = 0;
  int step = 0;                    // 0-based index among generated tokens
  std::uint64_t experts_hit = 0;   // this step's demand hits / misses / bytes read
  std::uint64_t experts_missed = 0;
  std::uint64_t bytes_read = 0;
  double ms = 0;                   // wall time of the step
  double io_wait_ms = 0;           // of which blocked on expert reads
};

enum class StopReason : std::uint8_t { max_tokens, stop_token, eos, context_full, cancelled };
const char* stop_reason_name(StopReason reason) noexcept;

struct GenerateResult {
  std::vector<int> tokens;         // generated ids, every one already fed
  StopReason stop = StopReason::max_tokens;
  int prompt_tokens = 0;
  double prompt_seconds = 0;
  double generate_seconds = 0;
};

struct ModelInfo {
  std::string arch;
  int n_layers = 0, n_kda_layers = 0, n_mla_layers = 0, n_moe_layers = 0;
  int hidden = 0, vocab = 0, n_experts = 0, top_k = 0;
  int ctx_tokens = 0;
  std::string expert_format;       // "VQ3R", "VQ2R", "VQ4P"
  std::uint64_t record_bytes = 0;
  std::uint64_t trunk_resident_bytes = 0;
  std::uint64_t embedding_resident_bytes = 0;  // embed_tokens loaded at open (0: one row read per token)
  int threads = 0;
  std::string kernel_isa;
  bool direct_io = false;
  int lookahead = 0;               // effective next-layer prefetch width
  int prefill_chunk = 1;
};

using profile::EngineProfile;

// A sequence of its own on an Engine's weights, experts and threads: the server keeps one per
// request and feeds them together (Engine::feed_batch). Made by Engine::new_sequence; must not
// outlive its engine.
class EngineSequence {
 public:
  [[nodiscard]] int position() const { return state_.position(); }
  [[nodiscard]] int ctx_tokens() const { return state_.ctx_tokens(); }
  // The logits after the last fed token (vocab floats); empty before the first feed.
  [[nodiscard]] std::span<const float> logits() const {
    return have_logits_ ? std::span<const float>(logits_) : std::span<const float>();
  }
  void reset() {
    state_.reset();
    have_logits_ = false;
  }
  model::RunState& run_state() { return state_; }

 private:
  friend class Engine;
  EngineSequence(model::RunState state, int vocab) : state_(std::move(state)), logits_(std::size_t(vocab), 0.0f) {}
  model::RunState state_;
  std::vector<float> logits_;
  bool have_logits_ = false;
};

// What fed tokens are: prompt tokens, or decode steps (sampled tokens fed back). By default
// (WASTE_PREFILL_MATMUL unset or on: the per-token rule, compute/forward/expert_batch.hpp) a
// prompt token's routed experts are multiplied by matrix products and a decode step's by lookup
// tables, so a token's bits depend on its kind and never on how the prompt is chunked or what
// else shares its pass; the two kinds differ within the 1e-4 oracle bound (docs/QUALITY.md). The
// trunk's projections follow the same rule (WASTE_PREFILL_INT8, on by default: prompt tokens by
// int8 products, decode steps by f32 ones; compute/forward/int8_mode.hpp), within its own bound.
// automatic: more than one token is a prompt, a single token a decode step.
enum class FeedKind { automatic, prompt, decode };

// One sequence's tokens in a batch feed. `embeddings`: empty, or one pointer per token as
// GenerateParams::prompt_embeddings (non-null = that position's row, e.g. a media position's
// vision tower output, instead of embed_tokens); the rows must outlive the feed_batch call.
struct SequenceFeed {
  EngineSequence* sequence = nullptr;
  std::span<const int> tokens;
  std::span<const float* const> embeddings = {};
  FeedKind kind = FeedKind::automatic;  // of these tokens, in every pass they are split into
};

// What an engine reads through (open_expert_plane, or a caller's own): the expert source, the
// trunk (null: trunk.bin loaded into a private image) and the daemon connection both read
// through, if any (the engine holds it and drops it last).
struct EngineParts {
  std::unique_ptr<DaemonConnection> daemon;
  std::unique_ptr<ExpertSource> source;
  std::shared_ptr<const Trunk> trunk;
  // DeepSeek-V4.1's Engram tables and the rows read through the data plane's shared page pool
  // (DaemonEngramRows on a lease of its own, open_expert_plane); null rows: the engine opens the
  // container's tables itself (EngramRowSource). Declared last: destroyed before the source.
  std::optional<engram::EngramTables> engram_tables;
  std::unique_ptr<engram::EngramRowReader> engram_rows;
  // Where the Engram rows come from, or why not from the plane (Engine::engram_origin()).
  std::string engram_note;
};

class Engine {
 public:
  // `source` null => through the daemon (options.daemon.enabled) or the in-process data plane
  // (a private IoServer sized by cache_records; its trunk image too unless `trunk` is given).
  // `trunk` null with a caller's source => trunk.bin is loaded into a private image; otherwise
  // that Trunk (e.g. over the daemon's shared image) is used and must belong to the same container.
  static Result<std::unique_ptr<Engine>> open(const EngineOptions& options,
                                               std::unique_ptr<ExpertSource> source = nullptr,
                                               std::shared_ptr<const Trunk> trunk = nullptr);
  // The engine over `parts` (source required) for the container `container` describes (read
  // once by the caller: compute/api/engine_open.hpp).
  static Result<std::unique_ptr<Engine>> open(const EngineOptions& options,
                                               std::shared_ptr<const ContainerInfo> container, EngineParts parts);
  // The checks on `options` alone that open() makes before anything is read or attached.
  static Status check_options(const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Feed tokens; the logits after the last (vocab floats, valid until the next call that feeds a
  // token or resets). Prompt tokens (`kind`; automatic: more than one token) go through chunked
  // prefill (prefill_chunk tokens per chunk, a 1-token remainder too), a decode step through
  // the decode step. Ids and the free context are checked
  // before anything is fed; an I/O error mid-way leaves the chunks before it fed (position()
  // tells how many tokens) and the state broken (the failed chunk had begun advancing it): later
  // feeds and session saves are refused, naming the failure, until reset() or a session load.
  // `embeddings`: as GenerateParams::prompt_embeddings (empty, or one pointer per token).
  Result<std::span<const float>> eval(std::span<const int> tokens, std::span<const float* const> embeddings = {},
                                      FeedKind kind = FeedKind::automatic);

  // §6.2: feed the prompt, then sample, feed, report, until max_tokens, a stop/eos token (fed,
  // then stop), a full context or the callback returning false (StopReason::cancelled).
  Result<GenerateResult> generate(std::span<const int> prompt, const GenerateParams& params,
                                  const std::function<bool(const TokenEvent&)>& on_token = {});

  // Continuous batching. A fresh sequence (position 0) with its own state.
  Result<std::unique_ptr<EngineSequence>> new_sequence() const;
  // Feed every sequence its tokens in one set of forward passes: up to prefill_chunk tokens in
  // all per pass, taken from the feeds in order (a long prompt continues in the next pass), so
  // each trunk weight and each distinct routed expert is read once per pass for the whole
  // batch. Each sequence ends with the logits and state it would have been fed alone (the same
  // bits as eval()). Ids and free context are checked for every feed before anything is fed;
  // on an error mid-way the passes before it stay fed (each sequence's position() tells) and
  // the sequences of the failed pass are broken (refused until their reset(), as eval()).
  Status feed_batch(std::span<const SequenceFeed> feeds);

  void reset();
  [[nodiscard]] int position() const;
  // Stage timings accumulated since open or reset_profile() (all zero unless options.profile).
  [[nodiscard]] const EngineProfile& profile() const;
  void reset_profile();
  // Each fed token's decisions (routed experts; CSA2's attended groups and candidate blocks)
  // appended to `trace` (compute/forward/trace.hpp; null = off). For tests against an oracle.
  void set_trace(forward::ForwardTrace* trace);
  [[nodiscard]] const ModelConfig& config() const;
  // The container's description the engine was opened from (its tokenizer, vision tower and
  // the rest read from it, not from a second parse).
  [[nodiscard]] const ContainerInfo& container() const;
  // Whether a token fed as a decode step gets the bits it gets as a prompt token (FeedKind): false
  // when prompt tokens take prefill's matrix products (the per-token rule, or the count rule, on
  // a container whose experts use them), or when either int8 trunk rule is on (prompt tokens: on by
  // default; decode steps: on by default with AVX-512 VNNI; compute/forward/int8_mode.hpp) on a
  // trunk with Q4G layer matrices; true on the LUT path alone (WASTE_PREFILL_MATMUL=off, VQ4P
  // experts, no routed experts) with f32 trunk products (WASTE_PREFILL_INT8=off and
  // WASTE_DECODE_INT8=off, or no Q4G layer matrix). A state reached through decode steps then
  // equals, byte for byte, the state a prefill of the same tokens reaches.
  [[nodiscard]] bool decode_matches_prompt() const;
  [[nodiscard]] ModelInfo info() const;
  [[nodiscard]] ExpertSourceStats stats() const;
  // The Engram row reader's counters (nullopt: the model has no Engram layers), and where the
  // rows come from: "Engram rows: waste-ioserver's shared page pool (...)" or "Engram rows: read
  // by this process (...)", the line a front end logs.
  [[nodiscard]] std::optional<engram::EngramRowStats> engram_stats() const;
  [[nodiscard]] const std::string& engram_origin() const;
  // Whether Engram rows are requested ahead (EngineOptions::engram_readahead as decided at open);
  // false for a model without Engram layers.
  [[nodiscard]] bool engram_readahead() const;
  [[nodiscard]] std::span<const float> logits() const;  // of the last fed token
  // The daemon connection an EngineOptions::daemon open holds; nullptr otherwise.
  [[nodiscard]] const DaemonConnection* daemon() const;
  // The engine's thread pool and kernel table, for work beside the forward pass (the vision
  // tower); not while a forward call is running.
  [[nodiscard]] forward::Exec exec() const;
  // The sequence state (sessions save and restore it; keep position() consistent).
  model::RunState& run_state();
  [[nodiscard]] const model::RunState& run_state() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  Status check_tokens(std::span<const int> tokens) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace waste

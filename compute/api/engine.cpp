#include "compute/api/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>

#include "compute/engram/engram_json.hpp"
#include "compute/engram/engram_read_meter.hpp"
#include "compute/forward/expert_batch.hpp"
#include "compute/forward/head_mode.hpp"
#include "compute/forward/int8_mode.hpp"
#include "compute/forward/forward.hpp"
#include "compute/forward/lookahead.hpp"
#include "compute/api/engine_open.hpp"
#include "compute/io/daemon_connect.hpp"
#include "compute/kernels/kernels.hpp"
#include "compute/model/decode_head.hpp"
#include "compute/model/resident_tensor.hpp"
#include "compute/model/weights.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "shared/container/codebooks.hpp"
#include "shared/container/container.hpp"

namespace waste {

const char* stop_reason_name(StopReason reason) noexcept {
  switch (reason) {
    case StopReason::max_tokens: return "max_tokens";
    case StopReason::stop_token: return "stop_token";
    case StopReason::eos: return "eos";
    case StopReason::context_full: return "context_full";
    case StopReason::cancelled: return "cancelled";
  }
  return "unknown";
}

// Member order is destruction order in reverse: forward refers to everything above it.
struct Engine::Impl {
  // First, so it goes last: the source and trunk below read the daemon's shared memory.
  std::unique_ptr<DaemonConnection> daemon;
  EngineOptions options;
  std::shared_ptr<const ContainerInfo> container;   // read once (engine_open.hpp)
  std::shared_ptr<const Trunk> trunk;
  Codebooks codebooks;
  model::ModelWeights weights;
  std::optional<model::ResidentTensor> embedding;  // weights.embed points here when loaded
  std::optional<model::DecodeHead> decode_head;    // weights.lm_head_decode points here when made
  std::unique_ptr<ExpertSource> source;
  std::unique_ptr<ThreadPool> pool;
  const kernels::KernelTable* kernels = nullptr;
  model::RunState state;
  std::vector<float> logits;
  bool have_logits = false;
  std::vector<int> codebook_base;   // per layer, from the manifest (-1 = no bank)
  EngineProfile profile;
  // DeepSeek-V4.1's Engram tables (engram.json, the token map, engram-L{n}.bin): opened when
  // the config has Engram layers; the forward pass reads their rows.
  std::optional<engram::EngramTables> engram_tables;
  std::unique_ptr<engram::EngramRowReader> engram_rows;   // the plane's (EngineParts) or its own source
  std::string engram_origin;
  bool engram_readahead = false;
  std::unique_ptr<forward::Forward> forward;

  // One decode step or one prefill chunk, timed into the profile when it is on.
  // `prompt`: prompt tokens (forward::Forward::prefill's `prompt`), else decode steps.
  Status feed(std::span<const int> tokens, std::span<const float* const> embeddings, bool prompt) {
    const auto start = options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    Status s = tokens.size() == 1 && !prompt
                   ? forward->step(tokens[0], state, logits, embeddings.empty() ? nullptr : embeddings[0])
                   : forward->prefill(tokens, state, logits, embeddings, prompt);
    have_logits = bool(s);
    if (options.profile) {
      profile.wall_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (s) profile.tokens += tokens.size();
      ++profile.forward_calls;
    }
    return s;
  }
  Status feed_decode(int token) {
    const int one[1] = {token};
    return feed(std::span<const int>(one), {}, false);
  }
};

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Shapes the forward pass relies on between the config and the record geometry.
Status check_geometry(const ModelConfig& c, const ExpertGeometry& g) {
  if (c.n_kda_layers() > 0 && c.kda_dim > kernels::kKdaMaxDim) {
    return make_error(Errc::unsupported, "linear_attn_config.head_dim " + std::to_string(c.kda_dim) +
                                             " exceeds the kernel limit " + std::to_string(kernels::kKdaMaxDim));
  }
  if (c.n_experts == 0) return ok();
  const int lat = c.expert_input_dim();
  if (g.rows[0] != c.moe_inter || g.cols[0] != lat || g.rows[1] != c.moe_inter || g.cols[1] != lat ||
      g.rows[2] != lat || g.cols[2] != c.moe_inter) {
    return make_error(Errc::format, "expert geometry does not match the config (moe_intermediate_size " +
                                        std::to_string(c.moe_inter) + ", expert input " + std::to_string(lat) + ")");
  }
  if (g.stages < 1 || g.stages > 8 || g.cols[0] % g.vec_dim != 0 || g.cols[2] % g.vec_dim != 0) {
    return make_error(Errc::format, "expert geometry: widths are not multiples of vec_dim " +
                                        std::to_string(g.vec_dim));
  }
  return ok();
}

}  // namespace

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Status Engine::check_options(const EngineOptions& options) {
  if (options.ctx_tokens < 1) {
    return make_error(Errc::argument, "ctx_tokens " + std::to_string(options.ctx_tokens) + " must be at least 1");
  }
  if (options.prefill_chunk < 1 || options.prefill_chunk > forward::kMaxPrefillChunk) {
    return make_error(Errc::argument, "prefill_chunk " + std::to_string(options.prefill_chunk) + " must be 1.." +
                                          std::to_string(forward::kMaxPrefillChunk));
  }
  if (options.lookahead < -1 || options.lookahead > forward::kMaxLookahead) {
    return make_error(Errc::argument, "lookahead " + std::to_string(options.lookahead) + " must be -1 (auto) or 0.." +
                                          std::to_string(forward::kMaxLookahead));
  }
  if (options.threads < 0) {
    return make_error(Errc::argument, "threads " + std::to_string(options.threads) + " must be 0 (auto) or more");
  }
  return ok();
}

Result<std::unique_ptr<Engine>> Engine::open(const EngineOptions& options, std::unique_ptr<ExpertSource> source,
                                             std::shared_ptr<const Trunk> trunk) {
  WASTE_TRY(check_options(options));
  auto container = read_container(options.model);
  if (!container) return std::unexpected(container.error());
  EngineParts parts;
  if (source) {
    parts.source = std::move(source);
  } else {
    auto plane = open_expert_plane(options, **container);
    if (!plane) return std::unexpected(plane.error());
    parts = std::move(*plane);
  }
  if (trunk) parts.trunk = std::move(trunk);
  return open(options, std::move(*container), std::move(parts));
}

Result<std::unique_ptr<Engine>> Engine::open(const EngineOptions& options,
                                             std::shared_ptr<const ContainerInfo> container, EngineParts parts) {
  const std::string where = options.model.string();
  WASTE_TRY(check_options(options));
  if (!container || !parts.source) {
    return make_error(Errc::argument, where + ": Engine::open needs the container's description and an expert source");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->daemon = std::move(parts.daemon);
  impl->container = std::move(container);
  std::unique_ptr<ExpertSource> source = std::move(parts.source);
  std::shared_ptr<const Trunk> trunk = std::move(parts.trunk);
  // After the source: a failed open destroys the Engram lease before the plane it reads.
  std::optional<engram::EngramTables> plane_engram_tables = std::move(parts.engram_tables);
  std::unique_ptr<engram::EngramRowReader> plane_engram_rows = std::move(parts.engram_rows);
  const ModelConfig& c = impl->container->manifest.config;
  WASTE_TRY(check_geometry(c, impl->container->geometry));

  if (trunk) {
    impl->trunk = std::move(trunk);
  } else {
    auto loaded = Trunk::load(options.model, impl->container->manifest);
    if (!loaded) return std::unexpected(loaded.error());
    impl->trunk = std::make_shared<const Trunk>(std::move(*loaded));
  }
  {
    auto books = Codebooks::load(impl->container->files.codebooks(), impl->container->manifest.quant);
    if (!books) return std::unexpected(books.error());
    impl->codebooks = std::move(*books);
  }
  {
    auto weights = model::ModelWeights::bind(c, *impl->trunk);
    if (!weights) return std::unexpected(weights.error().with_context(where));
    impl->weights = std::move(*weights);
  }
  if (options.resident_embedding && !impl->weights.embed->resident()) {
    auto table = model::ResidentTensor::load(*impl->trunk, *impl->weights.embed);
    if (!table) return std::unexpected(table.error().with_context(where));
    impl->embedding = std::move(*table);
    impl->weights.embed = &impl->embedding->tensor();
  }
  if (source) {
    impl->source = std::move(source);
  }
  {
    auto state = model::RunState::create(c, options.ctx_tokens);
    if (!state) return std::unexpected(state.error());
    impl->state = std::move(*state);
  }
  impl->pool = std::make_unique<ThreadPool>(options.threads);
  impl->kernels = &kernels::active();
  // Decode rows' head: the stored Q8G, or its Q6P or Q4G copy (forward/head_mode.hpp), made only
  // where decode rows take the int8 product at all.
  if (const forward::HeadMode copy = model::decode_head_copy(impl->container->manifest); copy != forward::HeadMode::q8) {
    auto head = model::DecodeHead::requantize(impl->weights.lm_head, copy, *impl->pool);
    if (!head) return std::unexpected(head.error().with_context(where));
    impl->decode_head = std::move(*head);
    impl->weights.lm_head_decode = impl->decode_head->matrix();
  }
  impl->logits.assign(std::size_t(c.vocab), 0.0f);
  impl->codebook_base.assign(std::size_t(c.n_layers), -1);
  for (const auto& [layer, bank] : impl->container->manifest.banks) {
    if (layer >= 0 && layer < c.n_layers) impl->codebook_base[std::size_t(layer)] = bank.codebook_base;
  }
  // Automatic width from the source's cache (0 when it holds every record: resident mode).
  const int lookahead = options.lookahead >= 0
                            ? options.lookahead
                            : forward::auto_lookahead(impl->source->cache_capacity_records(), c.n_moe_layers(),
                                                      c.top_k, c.n_experts, impl->pool->size());
  if (c.uses_engram()) {
    if (plane_engram_rows && plane_engram_tables) {
      // open_expert_plane decided: the rows come from the data plane's shared page pool.
      impl->engram_tables = std::move(plane_engram_tables);
      impl->engram_rows = std::move(plane_engram_rows);
      impl->engram_origin = parts.engram_note;
    } else {
      auto tables = engram::load_engram_tables(options.model);
      if (!tables) return std::unexpected(tables.error().with_context(where));
      impl->engram_tables = std::move(*tables);
      engram::EngramRowSourceOptions ro;
      ro.cache_bytes = sizing::engram_cache_bytes(c);
      auto rows = engram::EngramRowSource::open(options.model, impl->engram_tables->layout, ro);
      if (!rows) return std::unexpected(rows.error().with_context(where));
      impl->engram_rows = std::make_unique<engram::EngramRowSource>(std::move(*rows));
      impl->engram_origin = "Engram rows: read by this process (" +
                            (parts.engram_note.empty() ? std::string("the caller's expert source") : parts.engram_note) + ")";
    }
    // Read-ahead on or off, decided here once; every read counted and timed.
    auto readahead = engram::engram_readahead_setting(options.engram_readahead);
    if (!readahead) return std::unexpected(readahead.error().with_context(where));
    impl->engram_readahead = *readahead;
    impl->engram_rows = std::make_unique<engram::MeteredEngramRows>(std::move(impl->engram_rows), *readahead);
  }
  forward::Forward::Inputs in{c,
                              impl->weights,
                              *impl->trunk,
                              impl->codebooks,
                              impl->container->geometry,
                              *impl->source,
                              *impl->pool,
                              *impl->kernels,
                              options.ctx_tokens,
                              impl->codebook_base,
                              lookahead,
                              options.prefill_chunk,
                              impl->engram_tables ? &*impl->engram_tables : nullptr,
                              impl->engram_rows.get()};
  impl->forward = std::make_unique<forward::Forward>(in);
  if (options.profile) impl->forward->set_profile(&impl->profile);
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Status Engine::check_tokens(std::span<const int> tokens) const {
  const int vocab = impl_->container->manifest.config.vocab;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return make_error(Errc::argument, "token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                                            " is out of range 0.." + std::to_string(vocab - 1));
    }
  }
  return ok();
}

namespace {
bool is_prompt(FeedKind kind, std::size_t n_tokens) {
  return kind == FeedKind::prompt || (kind == FeedKind::automatic && n_tokens > 1);
}
}  // namespace

Result<std::span<const float>> Engine::eval(std::span<const int> tokens, std::span<const float* const> embeddings,
                                            FeedKind kind) {
  if (tokens.empty()) return make_error(Errc::argument, "eval: no tokens to feed");
  if (!embeddings.empty() && embeddings.size() != tokens.size()) {
    return make_error(Errc::argument, "eval: " + std::to_string(embeddings.size()) + " embedding rows for " +
                                          std::to_string(tokens.size()) + " tokens");
  }
  WASTE_TRY(check_tokens(tokens));
  if (Status usable = impl_->state.check_usable(); !usable) return std::unexpected(usable.error().with_context("eval"));
  const int free_positions = impl_->state.ctx_tokens() - impl_->state.position();
  if (std::int64_t(tokens.size()) > free_positions) {
    return make_error(Errc::argument, "eval: " + std::to_string(tokens.size()) + " tokens at position " +
                                          std::to_string(impl_->state.position()) + " overflow a context of " +
                                          std::to_string(impl_->state.ctx_tokens()) + " tokens");
  }
  const std::size_t chunk = std::size_t(impl_->options.prefill_chunk);
  const bool prompt = is_prompt(kind, tokens.size());
  for (std::size_t begin = 0; begin < tokens.size();) {
    const std::size_t n = std::min(chunk, tokens.size() - begin);
    if (Status fed = impl_->feed(tokens.subspan(begin, n), embeddings.empty() ? embeddings : embeddings.subspan(begin, n),
                                 prompt);
        !fed) {
      return std::unexpected(fed.error().with_context("token at position " + std::to_string(impl_->state.position())));
    }
    begin += n;
  }
  return std::span<const float>(impl_->logits);
}

Result<GenerateResult> Engine::generate(std::span<const int> prompt, const GenerateParams& params,
                                        const std::function<bool(const TokenEvent&)>& on_token) {
  const ModelConfig& c = impl_->container->manifest.config;
  if (params.max_tokens < 0) {
    return make_error(Errc::argument, "max_tokens " + std::to_string(params.max_tokens) + " must be 0 or more");
  }
  WASTE_TRY(check_tokens(prompt));
  if (Status stops = check_tokens(params.stop_tokens); !stops) {
    return std::unexpected(stops.error().with_context("stop_tokens"));
  }
  const int ctx = impl_->state.ctx_tokens();
  if (std::int64_t(prompt.size()) + impl_->state.position() >= ctx) {
    return make_error(Errc::argument, "prompt of " + std::to_string(prompt.size()) + " tokens at position " +
                                          std::to_string(impl_->state.position()) +
                                          " leaves no free position in a context of " + std::to_string(ctx) +
                                          " tokens");
  }
  if (prompt.empty() && !impl_->have_logits) {
    return make_error(Errc::argument, "generate: empty prompt and no previous token to continue from");
  }
  const int eos = params.eos_token == -1 ? (c.eos_token_id > 0 ? c.eos_token_id : -1) : params.eos_token;
  // The config's eos may be a list (GLM: end of text and two turn markers): each of them ends it.
  const std::vector<int> no_more_eos;
  const std::vector<int>& more_eos = params.eos_token == -1 ? c.eos_token_ids : no_more_eos;

  GenerateResult result;
  result.prompt_tokens = int(prompt.size());
  auto start = std::chrono::steady_clock::now();
  if (!prompt.empty()) {
    auto fed = eval(prompt, params.prompt_embeddings, FeedKind::prompt);
    if (!fed) return std::unexpected(fed.error());
  }
  result.prompt_seconds = seconds_since(start);

  start = std::chrono::steady_clock::now();
  Sampler sampler(params.sampling);
  result.tokens.reserve(std::size_t(std::min(params.max_tokens, ctx)));
  for (int step = 0; step < params.max_tokens; ++step) {
    const auto sample_start =
        impl_->options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    const int next = sampler.sample(impl_->logits);
    if (impl_->options.profile) {
      const double dt = seconds_since(sample_start);
      impl_->profile[profile::Stage::sampling].seconds += dt;
      ++impl_->profile[profile::Stage::sampling].calls;
      impl_->profile.wall_seconds += dt;
    }
    if (impl_->state.position() >= ctx) {
      result.stop = StopReason::context_full;
      break;
    }
    const ExpertSourceStats before = impl_->source->stats();
    const auto step_start = std::chrono::steady_clock::now();
    if (Status fed = impl_->feed_decode(next); !fed) {
      return std::unexpected(fed.error().with_context("generated token " + std::to_string(step)));
    }
    const ExpertSourceStats after = impl_->source->stats();
    result.tokens.push_back(next);
    TokenEvent event;
    event.token = next;
    event.step = step;
    event.experts_hit = after.hits - before.hits;
    event.experts_missed = after.misses - before.misses;
    event.bytes_read = after.bytes_read - before.bytes_read;
    event.ms = seconds_since(step_start) * 1e3;
    event.io_wait_ms = (after.wait_seconds - before.wait_seconds) * 1e3;
    if (on_token && !on_token(event)) {
      result.stop = StopReason::cancelled;
      break;
    }
    if (std::find(params.stop_tokens.begin(), params.stop_tokens.end(), next) != params.stop_tokens.end()) {
      result.stop = StopReason::stop_token;
      break;
    }
    if (next == eos || std::find(more_eos.begin(), more_eos.end(), next) != more_eos.end()) {
      result.stop = StopReason::eos;
      break;
    }
  }
  result.generate_seconds = seconds_since(start);
  return result;
}

forward::Exec Engine::exec() const { return forward::Exec{*impl_->pool, *impl_->kernels}; }

Result<std::unique_ptr<EngineSequence>> Engine::new_sequence() const {
  auto state = model::RunState::create(impl_->container->manifest.config, impl_->options.ctx_tokens);
  if (!state) return std::unexpected(state.error());
  return std::unique_ptr<EngineSequence>(new EngineSequence(std::move(*state), impl_->container->manifest.config.vocab));
}

Status Engine::feed_batch(std::span<const SequenceFeed> feeds) {
  for (std::size_t i = 0; i < feeds.size(); ++i) {
    const SequenceFeed& f = feeds[i];
    const std::string which = "batch feed " + std::to_string(i);
    if (!f.sequence) return make_error(Errc::argument, which + ": no sequence");
    if (f.tokens.empty()) return make_error(Errc::argument, which + ": no tokens to feed");
    if (Status ids = check_tokens(f.tokens); !ids) return std::unexpected(ids.error().with_context(which));
    if (Status usable = f.sequence->state_.check_usable(); !usable) {
      return std::unexpected(usable.error().with_context(which));
    }
    if (!f.embeddings.empty() && f.embeddings.size() != f.tokens.size()) {
      return make_error(Errc::argument, which + ": " + std::to_string(f.embeddings.size()) + " embedding rows for " +
                                            std::to_string(f.tokens.size()) + " tokens");
    }
    const int free_positions = f.sequence->ctx_tokens() - f.sequence->position();
    if (std::int64_t(f.tokens.size()) > free_positions) {
      return make_error(Errc::argument, which + ": " + std::to_string(f.tokens.size()) + " tokens at position " +
                                            std::to_string(f.sequence->position()) + " overflow a context of " +
                                            std::to_string(f.sequence->ctx_tokens()) + " tokens");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (feeds[j].sequence == f.sequence) {
        return make_error(Errc::argument, which + ": the same sequence as batch feed " + std::to_string(j));
      }
    }
  }
  const std::size_t chunk = std::size_t(impl_->options.prefill_chunk);
  std::vector<std::size_t> fed(feeds.size(), 0);
  // A sequence's logits are invalid until its last pass lands: a failed pass leaves none stale.
  for (const SequenceFeed& f : feeds) f.sequence->have_logits_ = false;
  std::vector<forward::Forward::Segment> segments;
  segments.reserve(feeds.size());
  for (;;) {
    segments.clear();
    std::size_t room = chunk;
    for (std::size_t i = 0; i < feeds.size() && room > 0; ++i) {
      const std::size_t left = feeds[i].tokens.size() - fed[i];
      if (left == 0) continue;
      const std::size_t n = std::min(left, room);
      EngineSequence& seq = *feeds[i].sequence;
      const auto rows = feeds[i].embeddings.empty() ? std::span<const float* const>() : feeds[i].embeddings.subspan(fed[i], n);
      segments.push_back({&seq.state_, feeds[i].tokens.subspan(fed[i], n), std::span<float>(seq.logits_), rows,
                          is_prompt(feeds[i].kind, feeds[i].tokens.size())});
      fed[i] += n;
      room -= n;
    }
    if (segments.empty()) return ok();
    const auto start = impl_->options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    Status s = impl_->forward->run_batch(segments);
    if (impl_->options.profile) {
      impl_->profile.wall_seconds += seconds_since(start);
      std::size_t n = 0;
      for (const auto& seg : segments) n += seg.tokens.size();
      if (s) impl_->profile.tokens += n;
      ++impl_->profile.forward_calls;
    }
    if (!s) return std::unexpected(s.error().with_context("batch of " + std::to_string(segments.size()) + " sequences"));
    for (std::size_t i = 0; i < feeds.size(); ++i) {
      if (fed[i] == feeds[i].tokens.size()) feeds[i].sequence->have_logits_ = true;
    }
  }
}

void Engine::reset() {
  impl_->state.reset();
  impl_->have_logits = false;
}

int Engine::position() const { return impl_->state.position(); }
const EngineProfile& Engine::profile() const { return impl_->profile; }
void Engine::set_trace(forward::ForwardTrace* trace) { impl_->forward->set_trace(trace); }

void Engine::reset_profile() { impl_->profile = EngineProfile{}; }
const ModelConfig& Engine::config() const { return impl_->container->manifest.config; }
const ContainerInfo& Engine::container() const { return *impl_->container; }
bool Engine::decode_matches_prompt() const {
  const bool experts_alike = config().n_experts == 0 || !forward::expert_batch::usable(impl_->container->geometry);
  // Prompt and decode rows take the same trunk products only with both int8 rules off (with both on,
  // calls that are not over a pass's rows still keep f32 for prompt rows).
  const Manifest& manifest = impl_->container->manifest;
  const bool trunk_alike = (!forward::int8_prefill_enabled() && !forward::int8_decode_enabled()) ||
                           !forward::has_int8_matrices(manifest);
  // Under the decode rule a decode step's logits come from the int8 head, a prompt's from f32.
  const bool head_alike = !forward::int8_decode_enabled() || !forward::has_int8_head(manifest);
  return experts_alike && trunk_alike && head_alike;
}
ExpertSourceStats Engine::stats() const { return impl_->source->stats(); }
std::optional<engram::EngramRowStats> Engine::engram_stats() const {
  if (!impl_->engram_rows) return std::nullopt;
  return impl_->engram_rows->stats();
}
const std::string& Engine::engram_origin() const { return impl_->engram_origin; }
bool Engine::engram_readahead() const { return impl_->engram_readahead; }
const DaemonConnection* Engine::daemon() const { return impl_->daemon.get(); }
std::span<const float> Engine::logits() const { return impl_->logits; }
model::RunState& Engine::run_state() { return impl_->state; }
const model::RunState& Engine::run_state() const { return impl_->state; }

ModelInfo Engine::info() const {
  const ModelConfig& c = config();
  ModelInfo m;
  m.arch = c.arch;
  m.n_layers = c.n_layers;
  m.n_kda_layers = c.n_kda_layers();
  m.n_mla_layers = c.n_mla_layers();
  m.n_moe_layers = c.n_moe_layers();
  m.hidden = c.hidden;
  m.vocab = c.vocab;
  m.n_experts = c.n_experts;
  m.top_k = c.top_k;
  m.ctx_tokens = impl_->state.ctx_tokens();
  m.expert_format = impl_->container->manifest.quant.fmt;
  m.record_bytes = impl_->container->geometry.record_bytes;
  m.trunk_resident_bytes = impl_->trunk->resident_bytes();
  m.embedding_resident_bytes = impl_->embedding ? impl_->embedding->bytes() : 0;
  m.threads = impl_->pool->size();
  m.kernel_isa = impl_->kernels->isa;
  m.direct_io = impl_->source->direct_io();
  m.lookahead = impl_->forward->lookahead();
  m.prefill_chunk = impl_->options.prefill_chunk;
  return m;
}

}  // namespace waste

#include "cli/serve/scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
#include <utility>

#include "compute/kernels/kernels.hpp"
#include "compute/prompt/stop_text.hpp"
#include "compute/session/session_file.hpp"

namespace waste::serve {
namespace {

std::uint64_t ns_since(std::chrono::steady_clock::time_point start) {
  return std::uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

PrefixKey prefix_key(const GenerationJob& job) {
  PrefixKey key(job.prompt.size());
  for (std::size_t i = 0; i < key.size(); ++i) key[i] = token_key(job.prompt[i]);
  for (const JobImage& image : job.images) {
    for (int p = 0; p < image.positions(); ++p) key[image.first + std::size_t(p)] = media_key(image.digest, std::size_t(p));
  }
  return key;
}

struct Scheduler::Slot {
  Slot(GenerationJob j, std::shared_ptr<RequestStream> s)
      : job(std::move(j)), stream(std::move(s)), sampler(job.sampling), text(job.stop_texts) {
    if (job.constraint) constraint.emplace(job.constraint);
  }
  GenerationJob job;
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<EngineSequence> sequence;  // made on the engine thread at admission
  Sampler sampler;
  StopTextStream text;
  std::optional<ConstraintState> constraint;
  std::vector<float> masked;  // constrained: this sequence's logits with the mask applied
  int prompt_fed = 0;   // prompt tokens fed so far
  int next_token = -1;  // >= 0: sampled, to be fed in the next pass (decoding)
  int generated = 0;
  bool done = false;
  std::vector<float> biased;  // the logits plus job.logit_bias (only when it has entries)
  // An unconstrained slot's next token and its logprob, worked out on the pool (pick()) before
  // sample() writes them to the stream; -1: none yet.
  int picked = -1;
  std::optional<TokenLogprob> picked_logprob;
  // Images: the tower's rows per image, and per prompt token the row to feed (null = embed_tokens).
  std::vector<std::vector<float>> media_rows;
  std::vector<const float*> embeddings;
  // Prefix cache (empty key: off): the prompt's key, the tokens sampled (ids; a stop id the
  // constraint reported as -2 is not among them), the prompt tokens restored, and the absolute
  // position where the prompt is snapshot (0: none).
  PrefixKey key;
  std::vector<int> output;
  int cached = 0;
  int snapshot_at = 0;
};

Scheduler::Scheduler(Engine& engine, const Tokenizer& tokenizer, SchedulerOptions options,
                     const vision::VisionTower* tower)
    : engine_(engine),
      tokenizer_(tokenizer),
      tower_(tower),
      options_(options),
      ctx_tokens_(engine.info().ctx_tokens),
      vocab_(engine.config().vocab),
      prefix_(options.prefix_cache_bytes) {
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { stop(); }

Admission& Admission::operator=(Admission&& other) noexcept {
  if (this != &other) {
    release();
    owner_ = std::exchange(other.owner_, nullptr);
  }
  return *this;
}

void Admission::release() {
  if (owner_) std::exchange(owner_, nullptr)->unreserve();
}

std::expected<Admission, ApiError> Scheduler::reserve() {
  std::lock_guard lock(mutex_);
  if (draining_ || stopping_) {
    return std::unexpected(ApiError{503, "the server is shutting down", "service_unavailable_error", "", ""});
  }
  // Active plus waiting plus reserved: a request that would find a free slot is never refused.
  if (in_flight_ >= options_.parallel + options_.max_queue) {
    return std::unexpected(ApiError{429, "too many requests waiting (" + std::to_string(options_.max_queue) +
                                             "); retry later",
                                    "rate_limit_error", "", "rate_limit_exceeded"});
  }
  ++in_flight_;
  return Admission(this);
}

void Scheduler::unreserve() {
  std::lock_guard lock(mutex_);
  --in_flight_;
}

std::expected<std::shared_ptr<RequestStream>, ApiError> Scheduler::submit(GenerationJob job) {
  auto ticket = reserve();
  if (!ticket) return std::unexpected(ticket.error());
  return submit(std::move(job), std::move(*ticket));
}

std::expected<std::shared_ptr<RequestStream>, ApiError> Scheduler::submit(GenerationJob job, Admission ticket) {
  if (ticket.owner_ != this) {
    return std::unexpected(ApiError{500, "submit() without a place reserved in this scheduler", "server_error", "", ""});
  }
  if (job.prompt.empty()) return std::unexpected(bad_param("prompt", "the prompt is empty"));
  for (int id : job.prompt) {
    if (id < 0 || id >= vocab_) {
      return std::unexpected(bad_param("prompt", "prompt token id " + std::to_string(id) + " is outside the vocabulary of " +
                                                     std::to_string(vocab_)));
    }
  }
  for (const auto& [id, bias] : job.logit_bias) {
    if (id >= vocab_) {
      return std::unexpected(bad_param("logit_bias", "logit_bias token id " + std::to_string(id) +
                                                         " is outside the vocabulary of " + std::to_string(vocab_)));
    }
  }
  std::size_t covered = 0;
  for (const JobImage& image : job.images) {
    if (!tower_) {
      return std::unexpected(bad_param(image.param, "'" + image.param + "': this model has no vision tower "
                                                    "(no vision.json in the container), so image_url parts are not supported"));
    }
    if (image.first < covered || image.positions() <= 0 || image.first + std::size_t(image.positions()) > job.prompt.size()) {
      return std::unexpected(bad_param(image.param, "'" + image.param + "': its media positions are not in the prompt"));
    }
    covered = image.first + std::size_t(image.positions());
  }
  if (int(job.prompt.size()) >= ctx_tokens_) {
    return std::unexpected(ApiError{400,
                                    "the prompt has " + std::to_string(job.prompt.size()) +
                                        " tokens; the context holds " + std::to_string(ctx_tokens_) +
                                        " (prompt plus at least one generated token)",
                                    "invalid_request_error", "messages", "context_length_exceeded"});
  }
  auto stream = std::make_shared<RequestStream>();
  if (job.max_tokens <= 0) {  // nothing to generate: the answer is known without a pass
    stream->finish(Finish::length, int(job.prompt.size()), 0);
    return stream;
  }
  // Made before the lock: a constrained slot's matcher expands its grammar's first stacks, and
  // nothing a request's content decides may run while the engine thread waits for mutex_.
  auto slot = std::make_unique<Slot>(std::move(job), stream);
  if (options_.prefix_cache_bytes > 0) slot->key = prefix_key(slot->job);
  {
    std::lock_guard lock(mutex_);
    if (draining_ || stopping_) {
      return std::unexpected(ApiError{503, "the server is shutting down", "service_unavailable_error", "", ""});
    }
    // The ticket's place becomes the queued request's (end() gives it back).
    ticket.owner_ = nullptr;
    queue_.push_back(std::move(slot));
    counters_.queued.store(int(queue_.size()), std::memory_order_relaxed);
  }
  wake_.notify_one();
  return stream;
}

void Scheduler::drain() {
  std::lock_guard lock(mutex_);
  draining_ = true;
}

void Scheduler::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

int Scheduler::in_flight() const {
  std::lock_guard lock(mutex_);
  return in_flight_;
}

void Scheduler::loop() {
  std::vector<std::unique_ptr<Slot>> active;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !active.empty(); });
      if (stopping_) break;
      while (int(active.size()) < options_.parallel && !queue_.empty()) {
        active.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      counters_.queued.store(int(queue_.size()), std::memory_order_relaxed);
    }
    step(active);
    std::erase_if(active, [](const auto& s) { return s->done; });
    counters_.active.store(int(active.size()), std::memory_order_relaxed);
  }
  // Stopping: whatever is left ends as cancelled.
  std::deque<std::unique_ptr<Slot>> left;
  {
    std::lock_guard lock(mutex_);
    left.swap(queue_);
    // Places still reserved by tickets not yet submitted stay counted until they are dropped.
    in_flight_ -= int(left.size() + active.size());
  }
  for (auto& slot : active) slot->stream->finish(Finish::cancelled, int(slot->job.prompt.size()), slot->generated);
  for (auto& slot : left) slot->stream->finish(Finish::cancelled, int(slot->job.prompt.size()), 0);
  counters_.active.store(0, std::memory_order_relaxed);
  counters_.queued.store(0, std::memory_order_relaxed);
}

void Scheduler::step(std::vector<std::unique_ptr<Slot>>& active) {
  for (auto& slot : active) {
    if (slot->stream->cancelled()) {
      end(*slot, Finish::cancelled);
      continue;
    }
    if (!slot->sequence) {
      auto sequence = engine_.new_sequence();
      if (!sequence) {
        end(*slot, Finish::error, sequence.error().message);
        continue;
      }
      slot->sequence = std::move(*sequence);
      resume(*slot);
      if (Status encoded = encode_images(*slot); !encoded) {
        end(*slot, Finish::error, encoded.error().message);
        continue;
      }
    }
  }
  // Decode tokens first (one each), then prompt chunks in arrival order with what is left of the
  // pass: feed_batch runs one pass for at most prefill_chunk tokens.
  std::vector<SequenceFeed> feeds;
  std::vector<Slot*> fed;
  std::vector<int> prefill_counts;
  int budget = options_.prefill_chunk;
  for (auto& slot : active) {
    if (slot->done || slot->next_token < 0) continue;
    feeds.push_back({slot->sequence.get(), std::span<const int>(&slot->next_token, 1), {}, FeedKind::decode});
    fed.push_back(slot.get());
    prefill_counts.push_back(0);
    --budget;
  }
  const std::uint64_t decode_tokens = feeds.size();
  std::uint64_t prefill_tokens = 0;
  for (auto& slot : active) {
    if (budget <= 0) break;
    if (slot->done || slot->next_token >= 0) continue;
    const int left = int(slot->job.prompt.size()) - slot->prompt_fed;
    int n = std::min(budget, left);
    if (slot->snapshot_at > slot->prompt_fed) n = std::min(n, slot->snapshot_at - slot->prompt_fed);
    const auto rows = slot->embeddings.empty()
                          ? std::span<const float* const>()
                          : std::span<const float* const>(slot->embeddings).subspan(std::size_t(slot->prompt_fed), std::size_t(n));
    feeds.push_back({slot->sequence.get(), std::span<const int>(slot->job.prompt.data() + slot->prompt_fed, n), rows,
                     FeedKind::prompt});
    fed.push_back(slot.get());
    prefill_counts.push_back(n);
    budget -= n;
    prefill_tokens += std::uint64_t(n);
  }
  if (feeds.empty()) return;

  const auto start = std::chrono::steady_clock::now();
  const Status status = engine_.feed_batch(feeds);
  counters_.feed_ns.fetch_add(ns_since(start), std::memory_order_relaxed);
  counters_.steps.fetch_add(1, std::memory_order_relaxed);
  counters_.decode_tokens_in_passes.fetch_add(decode_tokens, std::memory_order_relaxed);
  counters_.prefill_tokens_in_passes.fetch_add(prefill_tokens, std::memory_order_relaxed);
  const ExpertSourceStats stats = engine_.stats();
  counters_.experts_hit.store(stats.hits, std::memory_order_relaxed);
  counters_.experts_missed.store(stats.misses, std::memory_order_relaxed);
  counters_.bytes_read.store(stats.bytes_read, std::memory_order_relaxed);
  if (!status) {
    // The sequences of a failed pass are in an unknown state: each request ends with the error.
    for (Slot* slot : fed) end(*slot, Finish::error, status.error().message);
    return;
  }
  counters_.prompt_tokens.fetch_add(prefill_tokens, std::memory_order_relaxed);
  const auto sample_start = std::chrono::steady_clock::now();
  std::vector<Slot*> sampling;
  for (std::size_t i = 0; i < fed.size(); ++i) {
    Slot& slot = *fed[i];
    if (prefill_counts[i] > 0) {
      slot.prompt_fed += prefill_counts[i];
      if (slot.prompt_fed == slot.snapshot_at) remember(slot, std::size_t(slot.snapshot_at));
      if (slot.prompt_fed < int(slot.job.prompt.size())) continue;  // more chunks to come
      // The whole prompt: what the next turn of a chat starts with whatever the answer becomes.
      if (!slot.key.empty()) remember(slot, slot.job.prompt.size());
    }
    sampling.push_back(&slot);
  }
  // The compute threads are idle between passes: the unconstrained slots' samples and logprobs
  // (a pass over the vocabulary or two each) run on them, one slot per task, each slot's own
  // sampler and buffers, so every slot gets what it gets alone. Then, in order, the streams.
  std::vector<Slot*> picking;
  for (Slot* slot : sampling) {
    if (!slot->constraint) picking.push_back(slot);
  }
  if (picking.size() > 1) {
    engine_.exec().pool.parallel_for(std::int64_t(picking.size()), 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) pick(*picking[std::size_t(i)]);
    });
  }
  for (Slot* slot : sampling) sample(*slot);
  counters_.sample_ns.fetch_add(ns_since(sample_start), std::memory_order_relaxed);
}

// The sequence's logits, or with job.logit_bias added: a copy in slot.biased.
std::span<const float> Scheduler::biased_logits(Slot& slot) {
  const std::span<const float> logits = slot.sequence->logits();
  if (slot.job.logit_bias.empty()) return logits;
  slot.biased.assign(logits.begin(), logits.end());
  for (const auto& [id, bias] : slot.job.logit_bias) slot.biased[std::size_t(id)] += bias;
  return slot.biased;
}

// An unconstrained slot's next token and, when asked, its logprob: numbers only (its sampler, its
// logits, its buffers), so slots may be picked on several threads at once.
void Scheduler::pick(Slot& slot) {
  const std::span<const float> logits = biased_logits(slot);
  slot.picked = slot.sampler.sample(logits);
  slot.picked_logprob.reset();
  if (slot.job.top_logprobs >= 0) slot.picked_logprob = token_logprob(logits, slot.picked, slot.job.top_logprobs);
}

// The tower over each image, once per request, between passes (exec() is free then); the
// patches are dropped once encoded.
Status Scheduler::encode_images(Slot& slot) {
  if (slot.job.images.empty()) return ok();
  const auto start = std::chrono::steady_clock::now();
  const std::size_t hidden = std::size_t(engine_.config().hidden);
  slot.embeddings.assign(slot.job.prompt.size(), nullptr);
  for (JobImage& image : slot.job.images) {
    if (image.first + std::size_t(image.positions()) <= std::size_t(slot.prompt_fed)) {
      image.patches = {};  // wholly inside the restored prefix: its rows are never fed
      continue;
    }
    auto encoded = tower_->encode(engine_.exec(), image.patches);
    if (!encoded) return std::unexpected(encoded.error().with_context(image.param));
    const int positions = image.positions();
    if (encoded->size() != std::size_t(positions) * hidden) {
      return make_error(Errc::argument, image.param + ": the tower gave " + std::to_string(encoded->size()) +
                                            " floats for " + std::to_string(positions) + " media positions");
    }
    slot.media_rows.push_back(std::move(*encoded));
    const float* rows = slot.media_rows.back().data();
    for (int p = 0; p < positions; ++p) slot.embeddings[image.first + std::size_t(p)] = rows + std::size_t(p) * hidden;
    image.patches = {};
    counters_.images_encoded.fetch_add(1, std::memory_order_relaxed);
  }
  counters_.vision_ns.fetch_add(ns_since(start), std::memory_order_relaxed);
  return ok();
}

void Scheduler::end(Slot& slot, Finish reason, std::string error) {
  // A request that ended well leaves its state: the prompt and the generated tokens fed (the
  // last one sampled never is). Stored before the stream finishes, so a client that saw the
  // finish sees it in the counters. Only when decode steps give the bits a prefill of the same
  // tokens gives: under the per-token rule (prompt tokens by matrix products, decode steps by
  // LUT, Engine::decode_matches_prompt) the generated tokens' state is not what the next turn
  // would prefill, so that turn resumes from the prompt's snapshot and prefills the answer.
  if ((reason == Finish::stop || reason == Finish::length) && !slot.key.empty() && slot.sequence &&
      engine_.decode_matches_prompt() &&
      slot.prompt_fed == int(slot.job.prompt.size()) && slot.generated >= 1) {
    remember(slot, slot.job.prompt.size() + std::size_t(slot.generated - 1));
  }
  slot.next_token = -1;
  slot.done = true;
  {
    // Before the stream says so, so a reader that saw the finish sees in_flight() without it.
    std::lock_guard lock(mutex_);
    --in_flight_;
  }
  slot.stream->finish(reason, int(slot.job.prompt.size()), slot.generated, std::move(error));
}

// The next token: forced by the constraint, or sampled from the (masked) logits. -1 with the
// request ended when the constraint cannot go on; -2 when a stop id ended it.
int Scheduler::choose(Slot& slot, std::span<const float> logits) {
  if (!slot.constraint) return slot.sampler.sample(logits);
  // compute/prompt: forced tokens, the mask, a stop id that ends a stage.
  const int token = choose_constrained(*slot.constraint, slot.sampler, logits, slot.masked, slot.job.stop_ids);
  if (token == kNoTokenAllowed) end(slot, Finish::error, "the output constraint allows no token here");
  return token;
}

void Scheduler::sample(Slot& slot) {
  // An unconstrained slot's pick() (made on the pool beforehand, or now); the constraint's choice else.
  std::span<const float> logits;
  int token = -1;
  if (!slot.constraint) {
    if (slot.picked < 0) pick(slot);
    logits = slot.job.logit_bias.empty() ? slot.sequence->logits() : std::span<const float>(slot.biased);  // pick()'s
    token = std::exchange(slot.picked, -1);
  } else {
    logits = biased_logits(slot);
    token = choose(slot, logits);
  }
  if (token == -1) return;
  ++slot.generated;
  if (token >= 0 && !slot.key.empty()) slot.output.push_back(token);
  counters_.generated_tokens.fetch_add(1, std::memory_order_relaxed);
  if (token == -2 || (!slot.constraint && std::find(slot.job.stop_ids.begin(), slot.job.stop_ids.end(), token) !=
                                              slot.job.stop_ids.end())) {
    const std::string tail = slot.text.finish();
    if (!tail.empty()) slot.stream->push(Delta{tail, std::nullopt});
    return end(slot, Finish::stop);
  }
  const std::string bytes = tokenizer_.decode_token(token);
  if (slot.constraint) {
    if (Status accepted = slot.constraint->accept(token, bytes); !accepted) {
      return end(slot, Finish::error, "output constraint: " + accepted.error().message);
    }
  }
  Delta delta;
  if (slot.job.top_logprobs >= 0) {
    delta.logprob = slot.picked_logprob ? *std::exchange(slot.picked_logprob, std::nullopt)
                                        : token_logprob(logits, token, slot.job.top_logprobs);
    delta.logprob->text = bytes;
    for (const TopLogprob& t : delta.logprob->top) delta.logprob->top_text.push_back(tokenizer_.decode_token(t.token));
  }
  delta.text = slot.text.push(bytes);
  slot.stream->push(std::move(delta));
  if (slot.text.stopped()) return end(slot, Finish::stop);
  const bool complete = slot.constraint && slot.constraint->done();
  if (complete || slot.generated >= slot.job.max_tokens || slot.sequence->position() >= ctx_tokens_) {
    const std::string tail = slot.text.finish();
    if (!tail.empty()) slot.stream->push(Delta{tail, std::nullopt});
    return end(slot, complete ? Finish::stop : Finish::length);
  }
  slot.next_token = token;
}

// At admission: the longest cached prefix of the prompt (all but its last token at most: that one
// is fed for the logits) becomes the sequence's state.
void Scheduler::resume(Slot& slot) {
  if (slot.key.empty()) return;
  const std::size_t n = slot.job.prompt.size();
  if (auto hit = prefix_.find(slot.key, n - 1)) {
    // decode_into checks the bytes against the model before it writes: a refusal leaves the
    // fresh state as it was (and cannot happen for bytes this engine encoded).
    if (Status restored = session::decode_into(hit->state, engine_.config(), slot.sequence->run_state(), "prefix cache");
        restored) {
      slot.cached = slot.prompt_fed = int(hit->key.size());
      slot.stream->set_cached_tokens(slot.cached);
      counters_.cached_tokens.fetch_add(std::uint64_t(slot.cached), std::memory_order_relaxed);
      counters_.prefix_hits.fetch_add(1, std::memory_order_relaxed);
    } else {
      counters_.prefix_misses.fetch_add(1, std::memory_order_relaxed);
    }
  } else {
    counters_.prefix_misses.fetch_add(1, std::memory_order_relaxed);
  }
  // The prompt's snapshot: its last absolute multiple of the chunk before its last token.
  const int chunk = options_.prefill_chunk;
  slot.snapshot_at = (int(n) - 1) / chunk * chunk;
  if (slot.snapshot_at <= slot.prompt_fed) slot.snapshot_at = 0;
  publish_prefix_counters();
}

// A copy of the slot's state, keyed by the prompt's key and then the generated ids up to `length`.
void Scheduler::remember(Slot& slot, std::size_t length) {
  const model::RunState& state = slot.sequence->run_state();
  if (std::size_t(state.position()) != length || length > slot.key.size() + slot.output.size()) return;
  PrefixKey key(slot.key.begin(), slot.key.begin() + std::ptrdiff_t(std::min(length, slot.key.size())));
  for (std::size_t j = 0; key.size() < length; ++j) key.push_back(token_key(slot.output[j]));
  if (!prefix_.touch(key)) {
    const ModelConfig& config = engine_.config();
    const std::uint64_t size = session::session_bytes(config, session::make_header(config, state)) +
                               std::uint64_t(length) * sizeof(std::uint64_t);
    if (size <= prefix_.capacity() && prefix_.insert(PrefixSnapshot{std::move(key), session::encode(config, state)})) {
      counters_.prefix_stored.fetch_add(1, std::memory_order_relaxed);
    }
  }
  publish_prefix_counters();
}

void Scheduler::publish_prefix_counters() {
  counters_.prefix_bytes.store(prefix_.bytes(), std::memory_order_relaxed);
  counters_.prefix_entries.store(prefix_.entries(), std::memory_order_relaxed);
  counters_.prefix_evictions.store(prefix_.evictions(), std::memory_order_relaxed);
}

TokenLogprob token_logprob(std::span<const float> logits, int token, int top) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  // The normaliser by the table's vector kernel (within 1e-14 relative of the in-order sum:
  // kernels.hpp), so a logprob costs a fraction of the sample it reports on.
  const double log_total = std::log(kernels::sum_exp(kernels::active(), logits.data(), std::int64_t(logits.size()), max_logit));
  auto logprob = [&](int id) { return float(double(logits[std::size_t(id)]) - max_logit - log_total); };
  TokenLogprob out;
  out.token = token;
  out.logprob = logprob(token);
  const int k = std::min<int>(top, int(logits.size()));
  if (k > 0) {
    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
      return logits[std::size_t(a)] > logits[std::size_t(b)] || (logits[std::size_t(a)] == logits[std::size_t(b)] && a < b);
    });
    for (int i = 0; i < k; ++i) out.top.push_back({order[std::size_t(i)], logprob(order[std::size_t(i)])});
  }
  return out;
}

}  // namespace waste::serve

// Continuous batching for `waste serve`: one engine thread owns the Engine and every
// EngineSequence. Each step feeds, in one Engine::feed_batch, the pending token of every
// decoding sequence plus prompt tokens of waiting prompts up to prefill_chunk tokens in all
// (so one pass, and a long prompt never stalls decode for more than one chunk); then samples
// every sequence whose logits are new with its own Sampler and seed. A sequence's tokens are
// therefore the tokens Engine::generate gives the same request alone (the engine guarantees
// the logits bit for bit; sampling reads nothing but the sequence's own logits).
// New requests join at the next step; a cancelled one is dropped before the next pass.
// A constrained request (output_constraint.hpp) has its forced tokens taken as they are and its
// sampled tokens drawn from its own masked copy of its logits: still nothing but its own state.
// A request with images (JobImage) has them run through the vision tower on the engine thread
// when it is admitted, before its first pass (the tower shares the engine's thread pool, so the
// other sequences wait for it); its rows then replace the embeddings at its <|media_pad|>
// positions in every prefill chunk (SequenceFeed::embeddings).
// Prefix cache (options.prefix_cache_bytes > 0, prefix_cache.hpp): each sequence has a state of
// its own, which at admission is a copy of the cached snapshot whose key is the longest prefix of
// its prompt (media positions keyed by their image's digest, so identical pad ids of different
// images never match; an image wholly inside the restored prefix is not encoded again). A prompt
// is snapshot at its last absolute multiple of prefill_chunk before its last token (its prefill
// pieces stop there, so a resumed prompt is then fed in the same chunks as one prefilled whole),
// at its end (the next turn of a chat starts with it, however its answer is tokenized again), and
// a request that ends with stop or length at its end (prompt plus the generated tokens fed).
// Chunked prefill is bit-identical to token-by-token feeding (docs/design/forward.md), so the
// tokens are those of the same request without the cache.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <expected>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/serve/api_error.hpp"
#include "cli/serve/prefix_cache.hpp"
#include "compute/prompt/output_constraint.hpp"
#include "cli/serve/request_stream.hpp"
#include "compute/api/engine.hpp"
#include "compute/sampling/sampler.hpp"
#include "compute/tokenizer/tokenizer.hpp"
#include "compute/vision/preprocess.hpp"
#include "compute/vision/tower.hpp"

namespace waste::serve {

// One image of a request: decoded and preprocessed on the HTTP thread (so a queued request holds
// at most max_patches patches per image, not the decoded pixels), encoded on the engine thread.
struct JobImage {
  std::size_t first = 0;     // prompt index of its first <|media_pad|>
  vision::Patches patches;   // its pads: patches.grid.merged()
  std::string param;         // the request parameter it came from, for errors
  std::uint64_t digest = 0;  // image_digest() of its bytes: its positions' prefix-cache key
  [[nodiscard]] int positions() const { return patches.grid.merged(); }
};

struct GenerationJob {
  std::vector<int> prompt;            // non-empty, shorter than the context
  SamplingParams sampling;
  int max_tokens = 16;                // sampled tokens at most (a stop token counts)
  std::vector<int> stop_ids;          // end at once, their text not emitted (eos, the chat suffix's special)
  std::vector<std::string> stop_texts;  // end when the output text contains one (excluded)
  int top_logprobs = -1;              // -1 = no logprobs, else 0..20 alternatives per token
  std::vector<std::pair<int, float>> logit_bias;  // added to the logits before sampling (and logprobs)
  std::shared_ptr<const ConstraintPlan> constraint;  // null = free sampling
  std::vector<JobImage> images;       // in prompt order, not overlapping
};

struct SchedulerOptions {
  int parallel = 4;        // sequences decoding at once
  int max_queue = 64;      // requests that may wait for a slot; past that submit() answers 429
  int prefill_chunk = 64;  // tokens per pass in all (decode tokens + one prefill chunk)
  std::uint64_t prefix_cache_bytes = 0;  // the prefix cache's pool (PrefixCache); 0 = off
};

// Counters for /metrics. Writer: the engine thread (relaxed stores; each value is read alone).
struct SchedulerCounters {
  std::atomic<std::uint64_t> steps{0};
  std::atomic<std::uint64_t> prompt_tokens{0};     // prompt tokens fed
  std::atomic<std::uint64_t> generated_tokens{0};  // tokens sampled
  std::atomic<std::uint64_t> experts_hit{0}, experts_missed{0}, bytes_read{0};
  std::atomic<std::uint64_t> feed_ns{0}, sample_ns{0}, prefill_tokens_in_passes{0}, decode_tokens_in_passes{0};
  std::atomic<std::uint64_t> images_encoded{0}, vision_ns{0};  // the tower, on the engine thread
  // The prefix cache: prompt tokens restored instead of fed, lookups, snapshots stored, and the
  // pool's state after the engine thread's last change to it.
  std::atomic<std::uint64_t> cached_tokens{0}, prefix_hits{0}, prefix_misses{0}, prefix_stored{0};
  std::atomic<std::uint64_t> prefix_bytes{0}, prefix_entries{0}, prefix_evictions{0};
  std::atomic<int> active{0};
  std::atomic<int> queued{0};
};

class Scheduler;

// A place taken in the scheduler (active + queue) before a request is parsed: the HTTP side asks
// for one as soon as the request's bytes are in, so a request past the queue gets 429 before its
// JSON is parsed, its grammar compiled or its images decoded. Move-only; a ticket that is
// destroyed without submit() gives its place back.
class Admission {
 public:
  Admission() = default;
  Admission(Admission&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)) {}
  Admission& operator=(Admission&& other) noexcept;
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  ~Admission() { release(); }
  [[nodiscard]] bool held() const { return owner_ != nullptr; }

 private:
  friend class Scheduler;
  explicit Admission(Scheduler* owner) : owner_(owner) {}
  void release();
  Scheduler* owner_ = nullptr;
};

class Scheduler {
 public:
  // `engine`, `tokenizer` and `tower` must outlive the scheduler; from now on only its thread
  // uses the engine. `tower` null: requests with images are refused (400).
  Scheduler(Engine& engine, const Tokenizer& tokenizer, SchedulerOptions options,
            const vision::VisionTower* tower = nullptr);
  ~Scheduler();  // stop(): cancels what is left, joins the thread
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // A place for one request: 429 when parallel + max_queue requests are already in flight
  // (reserved places count), 503 once draining. The place counts in in_flight() until the ticket
  // is submitted and its request ends, or the ticket is dropped.
  std::expected<Admission, ApiError> reserve();
  // Queue a job on a reserved place: 503 once draining; 400 for a prompt that does not fit the
  // context or holds an id outside the vocabulary (the place is given back on every refusal).
  std::expected<std::shared_ptr<RequestStream>, ApiError> submit(GenerationJob job, Admission ticket);
  // reserve() then submit().
  std::expected<std::shared_ptr<RequestStream>, ApiError> submit(GenerationJob job);
  // Refuse new requests (503); what is queued or active runs to its end.
  void drain();
  // Cancel everything (finish: cancelled) and join the engine thread.
  void stop();
  // Requests queued or active.
  [[nodiscard]] int in_flight() const;
  [[nodiscard]] const SchedulerCounters& counters() const { return counters_; }
  [[nodiscard]] const SchedulerOptions& options() const { return options_; }
  [[nodiscard]] int ctx_tokens() const { return ctx_tokens_; }

 private:
  struct Slot;
  void loop();
  void step(std::vector<std::unique_ptr<Slot>>& active);
  void sample(Slot& slot);
  void pick(Slot& slot);
  static std::span<const float> biased_logits(Slot& slot);
  Status encode_images(Slot& slot);
  int choose(Slot& slot, std::span<const float> logits);
  void end(Slot& slot, Finish reason, std::string error = {});  // finish the request, leave in_flight
  void resume(Slot& slot);               // restore the longest cached prefix of its prompt
  void remember(Slot& slot, std::size_t length);  // snapshot its state, fed with key[0..length)
  void publish_prefix_counters();
  friend class Admission;
  void unreserve();  // a ticket dropped unused

  Engine& engine_;
  const Tokenizer& tokenizer_;
  const vision::VisionTower* tower_;
  const SchedulerOptions options_;
  const int ctx_tokens_;
  const int vocab_;
  SchedulerCounters counters_;
  PrefixCache prefix_;  // the engine thread's alone

  mutable std::mutex mutex_;  // guards queue_, draining_, stopping_, in_flight_ (reserved places included)
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Slot>> queue_;
  bool draining_ = false;
  bool stopping_ = false;
  int in_flight_ = 0;
  std::thread thread_;
};

// The prefix-cache key of a job's prompt: its token ids, and at each image's positions its
// digest and the offset in its block (prefix_cache.hpp).
PrefixKey prefix_key(const GenerationJob& job);

// log-softmax of `logits` at `token` and the `top` most likely ids (ties: lower id first).
TokenLogprob token_logprob(std::span<const float> logits, int token, int top);

}  // namespace waste::serve

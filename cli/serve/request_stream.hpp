// The hand-off between the engine thread (the only writer of events) and the HTTP thread that
// answers one request (the only reader). A mutex and a condition variable per request: one
// lock per generated token, never held across a forward pass. `cancel()` is the reader's only
// write; the engine thread drops a cancelled sequence before its next pass.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace waste::serve {

struct TopLogprob {
  int token = 0;
  float logprob = 0;
};

// One sampled token's log-probability (log-softmax of the model's logits before temperature
// and penalties, as OpenAI reports them) and the most likely alternatives.
struct TokenLogprob {
  int token = 0;
  std::string text;               // the token's bytes (may be part of a UTF-8 character)
  float logprob = 0;
  std::vector<TopLogprob> top;    // best first; `top_logprobs` entries
  std::vector<std::string> top_text;
};

// What the engine thread reports for one generated token: the text it releases (possibly
// empty: held back by the UTF-8 or stop-text streams) and, when asked for, its logprob.
struct Delta {
  std::string text;
  std::optional<TokenLogprob> logprob;
};

enum class Finish : std::uint8_t { none, stop, length, cancelled, error };
const char* finish_name(Finish finish) noexcept;

class RequestStream {
 public:
  // Engine thread.
  void push(Delta delta);
  void finish(Finish reason, int prompt_tokens, int completion_tokens, std::string error = {});
  // Prompt tokens whose state came from the prefix cache (usage.prompt_tokens_details).
  void set_cached_tokens(int cached_tokens);
  [[nodiscard]] bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // HTTP thread: the deltas pushed since the last call, waiting up to `timeout` when there are
  // none and the request is not finished. Returns true once the finish has been taken as well.
  bool take(std::vector<Delta>& out, std::chrono::milliseconds timeout);
  // HTTP thread: called (on the engine thread, outside the lock) after every push and the finish,
  // so the transport sends a token when it comes rather than at its next poll tick.
  void set_waker(std::function<void()> wake);
  void cancel() { cancelled_.store(true, std::memory_order_release); }
  [[nodiscard]] Finish finish_reason() const;
  [[nodiscard]] int prompt_tokens() const;
  [[nodiscard]] int completion_tokens() const;
  [[nodiscard]] int cached_tokens() const;
  [[nodiscard]] std::string error() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Delta> deltas_;
  Finish finish_ = Finish::none;
  int prompt_tokens_ = 0;
  int completion_tokens_ = 0;
  int cached_tokens_ = 0;
  std::string error_;
  std::function<void()> wake_;
  // Writer: the HTTP thread (release); reader: the engine thread (acquire) before each pass.
  std::atomic<bool> cancelled_{false};
};

}  // namespace waste::serve

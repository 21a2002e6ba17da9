#include "cli/serve/request_stream.hpp"

namespace waste::serve {

const char* finish_name(Finish finish) noexcept {
  switch (finish) {
    case Finish::none: return "none";
    case Finish::stop: return "stop";
    case Finish::length: return "length";
    case Finish::cancelled: return "cancelled";
    case Finish::error: return "error";
  }
  return "?";
}

void RequestStream::push(Delta delta) {
  std::function<void()> wake;
  {
    std::lock_guard lock(mutex_);
    deltas_.push_back(std::move(delta));
    wake = wake_;
  }
  ready_.notify_one();
  if (wake) wake();
}

void RequestStream::set_waker(std::function<void()> wake) {
  std::lock_guard lock(mutex_);
  wake_ = std::move(wake);
}

void RequestStream::finish(Finish reason, int prompt_tokens, int completion_tokens, std::string error) {
  std::function<void()> wake;
  {
    std::lock_guard lock(mutex_);
    finish_ = reason;
    prompt_tokens_ = prompt_tokens;
    completion_tokens_ = completion_tokens;
    error_ = std::move(error);
    wake = wake_;
  }
  ready_.notify_one();
  if (wake) wake();
}

void RequestStream::set_cached_tokens(int cached_tokens) {
  std::lock_guard lock(mutex_);
  cached_tokens_ = cached_tokens;
}

bool RequestStream::take(std::vector<Delta>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !deltas_.empty() || finish_ != Finish::none; });
  while (!deltas_.empty()) {
    out.push_back(std::move(deltas_.front()));
    deltas_.pop_front();
  }
  return finish_ != Finish::none;
}

Finish RequestStream::finish_reason() const {
  std::lock_guard lock(mutex_);
  return finish_;
}
int RequestStream::prompt_tokens() const {
  std::lock_guard lock(mutex_);
  return prompt_tokens_;
}
int RequestStream::completion_tokens() const {
  std::lock_guard lock(mutex_);
  return completion_tokens_;
}
int RequestStream::cached_tokens() const {
  std::lock_guard lock(mutex_);
  return cached_tokens_;
}
std::string RequestStream::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

}  // namespace waste::serve

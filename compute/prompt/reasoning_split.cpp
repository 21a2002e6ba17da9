#include "compute/prompt/reasoning_split.hpp"

#include <algorithm>

namespace waste {
namespace {

// The longest proper suffix of `text` that begins `marker`.
std::size_t partial_marker(std::string_view text, std::string_view marker) {
  for (std::size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (marker.starts_with(text.substr(text.size() - n))) return n;
  }
  return 0;
}

}  // namespace

ReasoningSplit::ReasoningSplit(ChatAffixes pair, bool inside)
    : pair_(std::move(pair)), state_(inside && !pair_.prefix.empty() && !pair_.suffix.empty() ? State::leading
                                                                                                : State::content) {}

ReasoningPiece ReasoningSplit::push(std::string_view text) {
  ReasoningPiece out;
  if (state_ == State::content) {
    out.content = text;
    return out;
  }
  held_ += text;
  if (state_ == State::leading) {
    // A repeated open marker at the very start is the model opening the pair itself.
    if (held_.size() < pair_.prefix.size() && std::string_view(pair_.prefix).starts_with(held_)) return out;
    if (held_.starts_with(pair_.prefix)) held_.erase(0, pair_.prefix.size());
    state_ = State::reasoning;
  }
  const std::size_t close = held_.find(pair_.suffix);
  if (close != std::string::npos) {
    out.reasoning = held_.substr(0, close);
    out.content = held_.substr(close + pair_.suffix.size());
    held_.clear();
    state_ = State::content;
    return out;
  }
  const std::size_t keep = partial_marker(held_, pair_.suffix);
  out.reasoning = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

ReasoningPiece ReasoningSplit::finish() {
  ReasoningPiece out;
  if (state_ != State::content) out.reasoning = std::move(held_);
  held_.clear();
  return out;
}

ReasoningPiece split_reasoning(const ChatAffixes& pair, std::string_view text, bool inside) {
  ReasoningSplit split(pair, inside);
  ReasoningPiece out = split.push(text);
  ReasoningPiece tail = split.finish();
  out.reasoning += tail.reasoning;
  out.content += tail.content;
  return out;
}

}  // namespace waste

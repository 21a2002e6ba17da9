// A reply's reasoning apart from its answer, incrementally. In a chat format with a think pair
// the model's turn opens with the pair's open marker (render_chat), so the reply starts inside its
// reasoning: everything up to the close marker is reasoning, the marker itself belongs to
// neither, and the rest is the answer (content, then parsed for tool calls). A reply that repeats
// the open marker first has it dropped. Text that may be the start of a marker is held back until
// the next text decides, so markers split across tokens (or across pushes) are still found.
// Runs on the HTTP thread of one request; the streamed and the blocking answer use the same split.
#pragma once

#include <string>
#include <string_view>

#include "compute/prompt/chat_format.hpp"

namespace waste {

struct ReasoningPiece {
  std::string reasoning;
  std::string content;
  bool operator==(const ReasoningPiece&) const = default;
};

class ReasoningSplit {
 public:
  // `pair`: the format's think pair. `inside`: the prompt opened it (false: everything is content,
  // as for an answer constrained from its first token, whose prompt closed the pair already).
  ReasoningSplit(ChatAffixes pair, bool inside);

  // What `text`, appended to the reply, releases now.
  ReasoningPiece push(std::string_view text);
  // The reply is complete: what was held back (reasoning that never closed stays reasoning).
  ReasoningPiece finish();
  [[nodiscard]] bool in_reasoning() const { return state_ != State::content; }

 private:
  enum class State : std::uint8_t { leading, reasoning, content };
  ChatAffixes pair_;
  State state_;
  std::string held_;
};

// The whole reply at once.
ReasoningPiece split_reasoning(const ChatAffixes& pair, std::string_view text, bool inside = true);

}  // namespace waste

// chat.json conversation formats (reference §5.5): a prefix and a suffix per role plus the string
// that opens the model's turn, and the prompt built from them. Templates are tokenized in markup
// mode and message content in plain mode, so user text can never forge a control token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compute/tokenizer/tokenizer.hpp"
#include "shared/result.hpp"

namespace waste {

enum class ChatRole : std::uint8_t { system, user, assistant };

struct ChatMessage {
  ChatRole role = ChatRole::user;
  std::string content;
};

struct ChatAffixes {
  std::string prefix;
  std::string suffix;
};

struct ChatFormat {
  // The reference engine reads at most this much (it silently truncates beyond); we refuse
  // instead, so a format means the same thing to both engines or is rejected here.
  static constexpr std::size_t kMaxFieldBytes = 127;
  static constexpr std::size_t kMaxFileBytes = 8192;

  ChatAffixes system;
  ChatAffixes user;
  ChatAffixes assistant;
  std::string open;
  // "tool_calls": the model's tool-call markup, name -> token string (e.g. "section_begin" ->
  // "<|tool_calls_section_begin|>"), for the tool-call parser (issue 12); prompts do not use it.
  std::vector<std::pair<std::string, std::string>> tool_calls;

  // All fields optional: {"system": [p, s], "user": [p, s], "assistant": [p, s], "open": "...",
  // "tool_calls": {"name": "token", ...}}.
  // Standard JSON string escapes apply.
  static Result<ChatFormat> parse(std::string_view json_text, std::string_view origin);
  static Result<ChatFormat> load(const std::filesystem::path& file);
  // The container's chat.json, or nullopt when it has none (raw continuation, no guessing).
  static Result<std::optional<ChatFormat>> load_from_container(const std::filesystem::path& container_dir);

  // A format counts as present if it can frame a user turn or open the model's turn.
  bool present() const noexcept { return !user.prefix.empty() || !assistant.prefix.empty() || !open.empty(); }
  // What opens the model's turn: `open`, falling back to the assistant prefix.
  const std::string& open_turn() const noexcept { return open.empty() ? assistant.prefix : open; }
  const ChatAffixes& affixes(ChatRole role) const noexcept;
};

// Prompt tokens for a conversation: each message is prefix(markup) content(plain) suffix(markup),
// in order; then, if `open_model_turn`, open_turn() in markup mode. No BOS is added: callers that
// want one prepend tokenizer.bos().
std::vector<int> build_chat_prompt(const Tokenizer& tokenizer, const ChatFormat& format,
                                   std::span<const ChatMessage> messages, bool open_model_turn = true);

// How generation ends in a chat: the assistant suffix as text (matched over decoded output), and
// the ids that end it at once: eos, and the suffix's first token when that is a special.
struct ChatStop {
  std::string text;
  std::vector<int> ids;
};
ChatStop chat_stop(const Tokenizer& tokenizer, const ChatFormat& format);

}  // namespace waste

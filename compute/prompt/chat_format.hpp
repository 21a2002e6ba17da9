// chat.json conversation formats (reference §5.5): a prefix and a suffix per role plus the string
// that opens the model's turn, and the prompt built from them. Templates are tokenized in markup
// mode and message content in plain mode, so user text can never forge a control token.
// Tools (optional "tools" object in chat.json): a declaration turn holding the request's tools
// array as JSON, the markup of assistant tool calls, and tool-result turns; every value taken
// from a request (tool JSON, ids, names, arguments) is plain text, only the format's own strings
// are markup.
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

enum class ChatRole : std::uint8_t { system, user, assistant, tool };

// One call in an assistant message of the history.
struct ChatToolCall {
  std::string id;         // as the client sent it back
  std::string name;
  std::string arguments;  // JSON text, rendered verbatim
};

struct ChatMessage {
  ChatRole role = ChatRole::user;
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // assistant
  std::string tool_call_id;              // tool
  std::string name;                      // tool: the function whose result this is ("" = look it up by id)
};

struct ChatAffixes {
  std::string prefix;
  std::string suffix;
};

// How a call is written. kimi: call.prefix ID arguments ARGS call.suffix, ID = functions.NAME:IDX
// (Kimi K2's section tokens). json: call.prefix {"name": NAME, "arguments": ARGS} call.suffix.
enum class ToolCallStyle : std::uint8_t { kimi, json };

struct ChatToolMarkup {
  ToolCallStyle style = ToolCallStyle::json;
  ChatAffixes declare;    // a turn before every message: prefix, the tools array as JSON, suffix
  ChatAffixes section;    // around all calls of one assistant turn (empty for json)
  ChatAffixes call;       // around one call
  std::string arguments;  // kimi: between the id and the arguments
  ChatAffixes result;     // a tool-result turn; "{name}" and "{id}" in the prefix become plain text
};

// One piece of a rendered prompt: format text (tokenized in markup mode) or request text (plain).
struct ChatSegment {
  std::string text;
  bool markup = false;
  bool operator==(const ChatSegment&) const = default;
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
  std::optional<ChatToolMarkup> tools;  // none: tool results are framed as user turns, calls refused

  // All fields optional: {"system": [p, s], "user": [p, s], "assistant": [p, s], "open": "...",
  // "tools": {"style": "kimi"|"json", "declare": [p, s], "section": [p, s], "call": [p, s],
  // "arguments": "...", "result": [p, s]}}. Standard JSON string escapes apply.
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

// The prompt as segments: with `tools_json` non-empty (and format.tools) the declaration turn
// first; then each message as prefix(markup) content(plain) suffix(markup) (an assistant's calls
// after its content, a tool result in the result affixes, or as a user turn without them); then,
// if `open_model_turn`, open_turn(). Kimi ids that are not functions.NAME:IDX are rewritten to that
// form, the same in the call and in its result (Kimi models follow the ids they see).
std::vector<ChatSegment> render_chat(const ChatFormat& format, std::span<const ChatMessage> messages,
                                     std::string_view tools_json = {}, bool open_model_turn = true);

// Prompt tokens for a conversation: render_chat's segments, each tokenized on its own. No BOS is
// added: callers that want one prepend tokenizer.bos().
std::vector<int> build_chat_prompt(const Tokenizer& tokenizer, const ChatFormat& format,
                                   std::span<const ChatMessage> messages, bool open_model_turn = true,
                                   std::string_view tools_json = {});

// Kimi's id for the index-th call to `name`: functions.NAME:IDX.
std::string kimi_tool_call_id(std::string_view name, int index);
// The function name in a Kimi id (text after the last '.' before the last ':'), or "" when the id
// is not NAME:DIGITS (vLLM's rule).
std::string kimi_tool_call_name(std::string_view id);

// How generation ends in a chat: the assistant suffix as text (matched over decoded output), and
// the ids that end it at once: eos, and the suffix's first token when that is a special.
struct ChatStop {
  std::string text;
  std::vector<int> ids;
};
ChatStop chat_stop(const Tokenizer& tokenizer, const ChatFormat& format);

}  // namespace waste

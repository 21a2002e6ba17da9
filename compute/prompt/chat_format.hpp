// chat.json conversation formats (reference §5.5): a prefix and a suffix per role plus the string
// that opens the model's turn, and the prompt built from them. Templates are tokenized in markup
// mode and message content in plain mode, so user text can never forge a control token.
// Tools (optional "tools" object in chat.json): a declaration turn holding the request's tools
// array as JSON, the markup of assistant tool calls, and tool-result turns; every value taken
// from a request (tool JSON, ids, names, arguments) is plain text, only the format's own strings
// are markup.
// Reasoning (optional "think" pair): the model's turn opens with the pair's open marker, the
// reply's text up to the close marker is its reasoning (reasoning_split.hpp), and past assistant
// turns carry their reasoning between the pair as "think_history" says. A "prelude" opens every
// prompt, an "effort" turn states the reasoning effort, and "stop" names the marker that ends a
// reply in formats whose turns have no suffix (the next role marker ends them).
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

#include <nlohmann/json_fwd.hpp>

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
  std::string reasoning;                 // assistant: its reasoning_content (rendered per think_history)
};

struct ChatAffixes {
  std::string prefix;
  std::string suffix;
};

// How a call is written. kimi: call.prefix ID arguments ARGS call.suffix, ID = functions.NAME:IDX
// (Kimi K2's section tokens). json: call.prefix {"name": NAME, "arguments": ARGS} call.suffix.
// glm: call.prefix NAME then <arg_key>K</arg_key><arg_value>V</arg_value> per argument, then
// call.suffix (GLM's flat XML; V is a string as it is, any other JSON value as JSON); the
// declaration lists one JSON line per function (glm_tools_declaration()) in its body's {tools}.
// dsml: DeepSeek-V4.1's markup (compute/prompt/dsml.hpp): section = the calls block's open and
// close, call = an invoke's open and close, parameters written by code; only with encoding dsml.
enum class ToolCallStyle : std::uint8_t { kimi, json, glm, dsml };

// How a conversation becomes a prompt. affixes: each message in its role's prefix and suffix
// (render_chat's generic path). dsml: DeepSeek-V4.1's rules in code (compute/prompt/dsml.hpp:
// effort line in the first system turn, tool results merged into the user turn, earlier
// reasoning dropped, DSML calls); the format's strings still name the markers.
enum class ChatEncoding : std::uint8_t { affixes, dsml };

// GLM's markers around one argument of a call (single special tokens of its vocabulary).
inline constexpr std::string_view kGlmKeyOpen = "<arg_key>", kGlmKeyClose = "</arg_key>";
inline constexpr std::string_view kGlmValueOpen = "<arg_value>", kGlmValueClose = "</arg_value>";

struct ChatToolMarkup {
  ToolCallStyle style = ToolCallStyle::json;
  ChatAffixes declare;    // a turn before every message: prefix, the body, suffix
  // The declaration turn's body (markup) with "{tools}" once where the tool list goes (plain):
  // the tools array as JSON, or for glm one JSON line per function. Empty: "{tools}" alone; for
  // the glm style, the body of the shipped configs/chat/glm-5.json (compiled in), so a chat.json
  // written before the body was a key renders as it did.
  std::string declare_body;
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

// How past assistant turns show their reasoning inside the think pair. current: only the turns
// after the last assistant answer without tool calls (the running tool-call chain) keep it, the
// others get the empty pair (Kimi-K2-Thinking). keep: every turn keeps it (GLM-5.3, whose
// template's clear_thinking defaults to false).
enum class ThinkHistory : std::uint8_t { current, keep };

// How a reasoning effort reaches the prompt: `turn` with "{effort}" replaced by the level's text,
// after the prelude. A request names a level (a key of `levels`, e.g. "high" -> "High") or,
// where `range` is set, a whole number within it (written in decimal). `fallback`: the level
// used when a request names none ("" = no effort turn then).
struct ChatEffort {
  std::string turn;
  std::vector<std::pair<std::string, std::string>> levels;
  std::optional<std::pair<long long, long long>> range;
  std::string fallback;
};

struct ChatFormat {
  // The reference engine reads at most this much (it silently truncates beyond); we refuse
  // instead, so a format means the same thing to both engines or is rejected here.
  static constexpr std::size_t kMaxFieldBytes = 127;
  static constexpr std::size_t kMaxFileBytes = 8192;

  ChatEncoding encoding = ChatEncoding::affixes;
  std::string prelude;  // markup before everything else (GLM: [gMASK]<sop>)
  ChatAffixes system;
  ChatAffixes user;
  ChatAffixes assistant;
  std::string open;
  std::string stop;     // what ends a reply when it is not the assistant suffix (GLM: <|user|>)
  std::optional<ChatAffixes> think;  // [open, close] of the reasoning
  ThinkHistory think_history = ThinkHistory::current;
  std::optional<ChatEffort> effort;
  std::string image;    // the media block of one image (stored for the vision front ends)
  std::optional<ChatToolMarkup> tools;  // none: tool results are framed as user turns, calls refused

  // All fields optional: {"encoding": "affixes"|"dsml", "prelude": "...", "system": [p, s], "user": [p, s], "assistant": [p, s],
  // "open": "...", "stop": "...", "think": [open, close], "think_history": "current"|"keep",
  // "effort": {"turn": "...{effort}...", "levels": {"low": "Low", ...}, "range": [min, max],
  // "default": "..."}, "image": "...", "tools": {"style": "kimi"|"json"|"glm"|"dsml", "declare": [p, s]
  // or [p, body, s], "section": [p, s], "call": [p, s], "arguments": "...", "result": [p, s]}}.
  // Standard JSON string escapes apply. Every field is at most kMaxFieldBytes except the
  // declaration body (which the reference engine never reads; the file limit bounds it).
  static Result<ChatFormat> parse(std::string_view json_text, std::string_view origin);
  static Result<ChatFormat> load(const std::filesystem::path& file);
  // The container's chat.json, or nullopt when it has none (raw continuation, no guessing).
  static Result<std::optional<ChatFormat>> load_from_container(const std::filesystem::path& container_dir);

  // A format counts as present if it can frame a user turn or open the model's turn.
  bool present() const noexcept { return !user.prefix.empty() || !assistant.prefix.empty() || !open.empty(); }
  // What opens the model's turn: `open`, falling back to the assistant prefix.
  const std::string& open_turn() const noexcept { return open.empty() ? assistant.prefix : open; }
  const ChatAffixes& affixes(ChatRole role) const noexcept;
  // What ends a reply as text: `stop`, falling back to the assistant suffix.
  const std::string& stop_text() const noexcept { return stop.empty() ? assistant.suffix : stop; }
};

// A request's reasoning effort resolved against a format: the level's text for the effort turn
// ("" = no turn). `requested` is a level name, or a number's decimal text when `numeric`; empty:
// the format's fallback. An error message (no prefix) when the format cannot express it.
Result<std::string> resolve_effort(const ChatFormat& format, std::string_view requested, bool numeric);

// What a front end asks of one rendering beyond the messages.
struct ChatRender {
  std::string_view tools_json;  // the request's tools array as JSON ("" = none declared)
  bool open_model_turn = true;  // end with the model's turn opened (and its think pair's open)
  bool start = true;            // this is the start of the conversation: prelude, effort, tools
  std::string_view effort;      // resolve_effort()'s level text ("" = the format's fallback level)
  // false: the model's turn opens with the think pair already closed (an empty reasoning), for
  // answers constrained from their first token.
  bool thinking = true;
};

// The prompt as segments: with `tools_json` non-empty (and format.tools) the declaration turn
// first; then each message as prefix(markup) content(plain) suffix(markup) (an assistant's calls
// after its content, a tool result in the result affixes, or as a user turn without them); then,
// if `open_model_turn`, open_turn(). Kimi ids that are not functions.NAME:IDX are rewritten to that
// form, the same in the call and in its result (Kimi models follow the ids they see).
std::vector<ChatSegment> render_chat(const ChatFormat& format, std::span<const ChatMessage> messages,
                                     std::string_view tools_json = {}, bool open_model_turn = true);
// The same with every option: prelude and effort turn first (when `start`), a think pair in each
// assistant turn of a format with one, the model's turn opened into its reasoning.
std::vector<ChatSegment> render_chat(const ChatFormat& format, std::span<const ChatMessage> messages,
                                     const ChatRender& options);

// Prompt tokens for a conversation: render_chat's segments, each tokenized on its own. No BOS is
// added: callers that want one prepend tokenizer.bos().
std::vector<int> build_chat_prompt(const Tokenizer& tokenizer, const ChatFormat& format,
                                   std::span<const ChatMessage> messages, bool open_model_turn = true,
                                   std::string_view tools_json = {});
std::vector<int> build_chat_prompt(const Tokenizer& tokenizer, const ChatFormat& format,
                                   std::span<const ChatMessage> messages, const ChatRender& options);
// The prompt's segments tokenized each on its own (markup or plain).
std::vector<int> tokenize_segments(const Tokenizer& tokenizer, std::span<const ChatSegment> segments);

// GLM's tool list: one JSON line (python_json) per function of the tools array, each ended by
// a newline (plain text; the instructions around it are the declaration body's).
std::string glm_tools_declaration(std::string_view tools_json);
// The declaration body of configs/chat/glm-5.json as compiled in (the glm style's fallback).
const std::string& shipped_glm_declare_body();
// A JSON value written as Python's json.dumps does by default (", " and ": " separators, no
// ASCII escaping), the form GLM's template gives tool signatures and non-string arguments.
std::string python_json(const nlohmann::json& value);

// Kimi's id for the index-th call to `name`: functions.NAME:IDX.
std::string kimi_tool_call_id(std::string_view name, int index);
// The function name in a Kimi id (text after the last '.' before the last ':'), or "" when the id
// is not NAME:DIGITS (vLLM's rule).
std::string kimi_tool_call_name(std::string_view id);

// How generation ends in a chat: stop_text() (matched over decoded output), and the ids that end
// it at once: eos, the stop text's first token when that is a special, and for the glm tools
// style the result turn's first special (the model asks for tool results with it); never the
// first token of the think pair's close (that would end the reply where its reasoning ends).
struct ChatStop {
  std::string text;
  std::vector<int> ids;
};
ChatStop chat_stop(const Tokenizer& tokenizer, const ChatFormat& format);

}  // namespace waste

// Tool calls out of the model's text, incrementally: the chat format's call markup (Kimi's
// section/call tokens, or the JSON form `<tool_call>{"name": …, "arguments": …}</tool_call>`)
// becomes tool-call events, everything else content. Text that may be the start of a marker is
// held back until it is decided. A call whose header is malformed (no call marker after a
// section marker, an id that is not NAME:IDX, no "name"/"arguments" in the JSON form) is given
// back as content, markers included. Arguments are passed on as raw slices, never re-parsed
// (a slice need not be valid JSON; concatenated they are the model's text). Runs on the HTTP
// thread of one request; the streamed and the blocking answer use the same parser.
// GLM's flat XML (`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>`) is
// read a whole call at a time: at its close marker the call becomes a call_start and one arguments
// event holding the pairs as a JSON object (a value that is JSON other than a string, e.g. 3 or
// true or {…}, goes in as that value; any other text as a JSON string). A call whose name is empty
// or holds a newline, whose text between pairs is not whitespace, or that repeats a key, or that
// the reply ends inside, is given back as content.
// DSML (DeepSeek-V4.1, compute/prompt/dsml.hpp) is read an invoke at a time inside its calls
// block: at the invoke's close marker the call becomes a call_start and one arguments event (the
// parameters as a JSON object: string="true" values as JSON strings, string="false" values as the
// JSON they hold). An invoke parse_dsml_invoke() refuses, or one the reply ends inside, is given
// back as content.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compute/prompt/chat_format.hpp"

namespace waste {

struct ToolCallEvent {
  enum class Kind : std::uint8_t { content, call_start, arguments };
  Kind kind = Kind::content;
  int index = 0;        // call_start / arguments: the call's position in tool_calls
  std::string text;     // content or arguments slice
  std::string id;       // call_start
  std::string name;     // call_start
};

class ToolCallParser {
 public:
  // `id_prefix`: the json style has no ids in the text; call i gets id_prefix + i.
  ToolCallParser(const ChatToolMarkup& markup, std::string id_prefix);

  // Events for `text` appended to the output (possibly none: held back).
  std::vector<ToolCallEvent> push(std::string_view text);
  // The output is complete: what was held back, as content or (inside arguments) as arguments.
  std::vector<ToolCallEvent> finish();
  [[nodiscard]] int calls() const { return calls_; }

 private:
  enum class State : std::uint8_t { text, section, header, arguments };
  void run(std::vector<ToolCallEvent>& out, bool final);
  bool step(std::vector<ToolCallEvent>& out, bool final);  // false: needs more text
  void give_back(std::vector<ToolCallEvent>& out);         // a malformed call: its raw text is content
  void content(std::vector<ToolCallEvent>& out, std::string text);
  bool header_json(std::vector<ToolCallEvent>& out, bool final);
  // GLM and DSML: the body up to the call's close marker, read whole (malformed: given back as text).
  bool call_marked(std::vector<ToolCallEvent>& out, bool final);

  ChatToolMarkup markup_;
  std::string id_prefix_;
  State state_ = State::text;
  std::string pending_;   // text not yet decided
  std::string raw_;       // the markup consumed since the section / call began (given back if malformed)
  int calls_ = 0;
  bool in_section_ = false;
};

// The whole output at once: content (empty if none) and the calls.
struct ParsedToolCalls {
  std::string content;
  std::vector<ChatToolCall> calls;
};
ParsedToolCalls parse_tool_calls(const ChatToolMarkup& markup, std::string_view text, const std::string& id_prefix);

}  // namespace waste

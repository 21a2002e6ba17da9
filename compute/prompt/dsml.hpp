// DeepSeek-V4.1's conversation encoding ("DSML"), which chat.json affixes cannot express: the
// reasoning effort as a line at the start of the first system turn (thinking mode only), tool
// results folded into the following user turn as <tool_result>…</tool_result> (in the order of
// the calls that asked for them), earlier turns' reasoning dropped unless tools are declared,
// mid-conversation system turns that open the model's turn like a user turn, and calls written in
// DSML markup: a calls block holding one invoke per call, one parameter per argument, each marked
// string="true" (the text as it is) or string="false" (JSON). The format's own strings (BOS, role
// markers, think pair, effort line, declaration body, calls block and invoke markers, result
// tags) come from its chat.json (configs/chat/deepseek-v4.1.json); the parameter tag is fixed here.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compute/prompt/chat_format.hpp"
#include "shared/result.hpp"

namespace waste {

// One argument's tag, written after the invoke's header: <｜DSML｜ parameter name="K" string="…">V</｜DSML｜ parameter>.
inline constexpr std::string_view kDsmlParameterOpen = "<｜DSML｜ parameter name=\"";
inline constexpr std::string_view kDsmlParameterClose = "</｜DSML｜ parameter>";

// The prompt of a conversation in DSML (render_chat() sends a format with encoding dsml here).
// With options.tools_json, the declaration follows the first system turn's text (a system turn
// with empty text is put first when the conversation has none). options.thinking false is the
// format's chat mode: no effort line and every model turn opens with the think pair's close.
// options.start false: a continuation (no BOS, no effort line, a system turn is mid-conversation).
std::vector<ChatSegment> render_dsml(const ChatFormat& format, std::span<const ChatMessage> messages,
                                     const ChatRender& options);

// The tool schemas of a declaration: each tool's function object as compact JSON with ", " and
// ": " separators, keys in the request's order, one per line (no newline after the last).
std::string dsml_tool_schemas(std::string_view tools_json);

// One call as DSML (the invoke's open marker onwards, through its close marker): each key of the
// arguments object in its order; a string value as it is (string="true"), any other as JSON
// (string="false"); arguments that are not a JSON object become one parameter "arguments".
std::string dsml_invoke(const ChatToolMarkup& markup, const ChatToolCall& call);

// A parsed invoke: the function's name and its arguments as a JSON object's text.
struct DsmlCall {
  std::string name;
  std::string arguments;
};
// The text between an invoke's open marker and its close marker (` name="NAME">` then parameters
// separated by whitespace) read back; an error naming what is wrong (no name, an unterminated or
// repeated parameter, a string="false" value that is not JSON, text between parameters).
Result<DsmlCall> parse_dsml_invoke(std::string_view body);

}  // namespace waste

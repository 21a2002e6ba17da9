// DeepSeek-V4.1's DSML encoding (compute/prompt/dsml.*) through configs/chat/deepseek-v4.1.json:
// prompts compared byte for byte with strings written out by hand from the format's documented
// rules (thinking on and off, the effort line, a tool declaration, calls rendered back, results
// folded into the user turn in call order, earlier reasoning dropped, a mid-conversation system
// turn), DSML calls in generated text read back into tool calls (whole and streamed), malformed
// markup given back as text, and the chat.json checks (forced calls: test_dsml_forced_call.cpp).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/convert/tokenizer_files.hpp"
#include "compute/prompt/chat_format.hpp"
#include "compute/prompt/dsml.hpp"
#include "compute/prompt/tool_call_parser.hpp"
#include "tests/tokenizer/test_support.hpp"

namespace waste {
namespace {

const ChatFormat& dsml_format() {
  static const ChatFormat format = [] {
    auto loaded = ChatFormat::load(std::filesystem::path(WASTE_SOURCE_DIR) / "configs" / "chat" / "deepseek-v4.1.json");
    REQUIRE(loaded.has_value());
    return std::move(*loaded);
  }();
  return format;
}

std::string text_of(const std::vector<ChatSegment>& segments) {
  std::string out;
  for (const ChatSegment& s : segments) out += s.text;
  return out;
}

ChatMessage msg(ChatRole role, std::string content) {
  ChatMessage m;
  m.role = role;
  m.content = std::move(content);
  return m;
}

std::string render(const std::vector<ChatMessage>& messages, bool thinking, std::string_view effort = {},
                   std::string_view tools_json = {}) {
  ChatRender options;
  options.thinking = thinking;
  options.effort = effort;
  options.tools_json = tools_json;
  return text_of(render_chat(dsml_format(), messages, options));
}

const std::string kBos = "<｜begin▁of▁sentence｜>";
const std::string kEos = "<｜end▁of▁sentence｜>";
const std::string kEffort75 =
    "Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the reasoning)\n\n";

}  // namespace

TEST_CASE("dsml: a two-turn chat in thinking mode drops the earlier reasoning", "[tokenizer][dsml]") {
  ChatMessage answer = msg(ChatRole::assistant, "Hello!");
  answer.reasoning = "The user greets me.";
  const std::vector<ChatMessage> messages = {msg(ChatRole::system, "You are helpful."), msg(ChatRole::user, "Hi"),
                                             answer, msg(ChatRole::user, "2+2?")};
  CHECK(render(messages, true) ==
        "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more "
        "thorough the reasoning)\n\nYou are helpful.<｜User｜>Hi<｜Assistant｜></think>Hello!<｜end▁of▁sentence｜>"
        "<｜User｜>2+2?<｜Assistant｜><think>");
}

TEST_CASE("dsml: a two-turn chat with thinking off has no effort line and closed think", "[tokenizer][dsml]") {
  ChatMessage answer = msg(ChatRole::assistant, "Hello!");
  answer.reasoning = "never shown";
  const std::vector<ChatMessage> messages = {msg(ChatRole::system, "You are helpful."), msg(ChatRole::user, "Hi"),
                                             answer, msg(ChatRole::user, "2+2?")};
  CHECK(render(messages, false) ==
        "<｜begin▁of▁sentence｜><｜System｜>You are helpful.<｜User｜>Hi<｜Assistant｜></think>Hello!"
        "<｜end▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜></think>");
  // Without a system message chat mode writes no system marker at all.
  CHECK(render({msg(ChatRole::user, "q")}, false) == "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think>");
}

TEST_CASE("dsml: the effort line takes levels and whole numbers 1 to 100", "[tokenizer][dsml]") {
  const ChatFormat& format = dsml_format();
  CHECK(resolve_effort(format, "low", false).value() == "50");
  CHECK(resolve_effort(format, "high", false).value() == "75");
  CHECK(resolve_effort(format, "max", false).value() == "100");
  CHECK(resolve_effort(format, "", false).value() == "75");
  CHECK(resolve_effort(format, "37", true).value() == "37");
  CHECK(resolve_effort(format, "0", true).error().message ==
        "must be one of high, low, max, or a whole number from 1 to 100 for this model, not 0");
  CHECK(!resolve_effort(format, "101", true).has_value());
  CHECK(!resolve_effort(format, "xhigh", false).has_value());

  CHECK(render({msg(ChatRole::user, "q")}, true, "75") ==
        "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more "
        "thorough the reasoning)\n\n<｜User｜>q<｜Assistant｜><think>");
  CHECK(render({msg(ChatRole::user, "q")}, true, "37") ==
        "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 37 (range 1-100, the higher the value, the more "
        "thorough the reasoning)\n\n<｜User｜>q<｜Assistant｜><think>");
}

TEST_CASE("dsml: tools declared, calls rendered back, results merged into the next user turn", "[tokenizer][dsml]") {
  const std::string tools =
      R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": )"
      R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}, "strict": true}}])";
  ChatMessage calls = msg(ChatRole::assistant, "");
  calls.reasoning = "Need data.";
  calls.tool_calls = {{"c1", "get_weather", R"({"city": "Paris"})"},
                      {"c2", "get_weather", R"({"city": "Rome", "days": 3})"}};
  ChatMessage rain = msg(ChatRole::tool, "rain");
  rain.tool_call_id = "c2";
  ChatMessage sun = msg(ChatRole::tool, "sun");
  sun.tool_call_id = "c1";
  const std::vector<ChatMessage> messages = {msg(ChatRole::user, "Weather in Paris and Rome?"), calls, rain, sun,
                                             msg(ChatRole::user, "Thanks")};
  const std::string expected =
      "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more "
      "thorough the reasoning)\n\n"
      "\n\n## Tools\n\n"
      "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
      "\"<｜DSML｜ calls>\" block like the following:\n\n"
      "<｜DSML｜ calls>\n"
      "<｜DSML｜ invoke name=\"$TOOL_NAME\">\n"
      "<｜DSML｜ parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜ parameter>\n"
      "...\n"
      "</｜DSML｜ invoke>\n"
      "<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n"
      "...\n"
      "</｜DSML｜ invoke>\n"
      "</｜DSML｜ calls>\n\n"
      "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
      "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
      "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
      "<think>...</think> BEFORE any tool calls or final response.\n\n"
      "Otherwise, output directly after </think> with tool calls or final response.\n\n"
      "### Available Tool Schemas\n\n"
      "{\"name\": \"get_weather\", \"description\": \"Weather\", \"parameters\": {\"type\": \"object\", "
      "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}\n\n"
      "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n"
      "<｜User｜>Weather in Paris and Rome?<｜Assistant｜><think>Need data.</think>"
      "\n\n<｜DSML｜ calls>\n"
      "<｜DSML｜ invoke name=\"get_weather\">\n"
      "<｜DSML｜ parameter name=\"city\" string=\"true\">Paris</｜DSML｜ parameter>\n"
      "</｜DSML｜ invoke>\n"
      "<｜DSML｜ invoke name=\"get_weather\">\n"
      "<｜DSML｜ parameter name=\"city\" string=\"true\">Rome</｜DSML｜ parameter>\n"
      "<｜DSML｜ parameter name=\"days\" string=\"false\">3</｜DSML｜ parameter>\n"
      "</｜DSML｜ invoke>\n"
      "</｜DSML｜ calls><｜end▁of▁sentence｜>"
      "<｜User｜><tool_result>sun</tool_result>\n\n<tool_result>rain</tool_result>\n\nThanks<｜Assistant｜><think>";
  CHECK(render(messages, true, {}, tools) == expected);

  // The request's text stays plain (never a control token); the format's markers are markup.
  ChatRender options;
  options.tools_json = tools;
  const std::vector<ChatSegment> segments = render_chat(dsml_format(), messages, options);
  bool user_plain = false, name_plain = false, value_plain = false;
  int markers = 0;
  for (const ChatSegment& s : segments) {
    if (s.text == "Weather in Paris and Rome?") user_plain = !s.markup;
    if (s.text == "get_weather") name_plain = !s.markup;
    if (s.text == "Rome") value_plain = !s.markup;
    if (s.text.find("<｜DSML｜ invoke name=\"") != std::string::npos) {
      CHECK(s.markup);
      ++markers;
    }
  }
  CHECK(user_plain);
  CHECK(name_plain);
  CHECK(value_plain);
  CHECK(markers >= 2);
}

TEST_CASE("dsml: a mid-conversation system turn opens the model's turn", "[tokenizer][dsml]") {
  const std::vector<ChatMessage> messages = {msg(ChatRole::user, "one"), msg(ChatRole::assistant, "two"),
                                             msg(ChatRole::system, "new rule")};
  CHECK(render(messages, false) ==
        "<｜begin▁of▁sentence｜><｜User｜>one<｜Assistant｜></think>two<｜end▁of▁sentence｜>"
        "<｜System｜>new rule<｜Assistant｜></think>");
  CHECK(render(messages, true) == kBos + "<｜System｜>" + kEffort75 +
                                      "<｜User｜>one<｜Assistant｜></think>two" + kEos +
                                      "<｜System｜>new rule<｜Assistant｜><think>");
}

TEST_CASE("dsml: waste chat's pieces (a system start, then continued turns)", "[tokenizer][dsml]") {
  const ChatMessage system = msg(ChatRole::system, "Be brief.");
  ChatRender first;
  first.open_model_turn = false;
  CHECK(text_of(render_chat(dsml_format(), std::span(&system, 1), first)) ==
        "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more "
        "thorough the reasoning)\n\nBe brief.");
  const ChatMessage user = msg(ChatRole::user, "next");
  ChatRender later;
  later.start = false;
  CHECK(text_of(render_chat(dsml_format(), std::span(&user, 1), later)) == "<｜User｜>next<｜Assistant｜><think>");
  later.thinking = false;
  CHECK(text_of(render_chat(dsml_format(), std::span(&user, 1), later)) == "<｜User｜>next<｜Assistant｜></think>");
}

namespace {

const std::string kTwoCalls =
    "Let me check.\n\n<｜DSML｜ calls>\n"
    "<｜DSML｜ invoke name=\"get_weather\">\n"
    "<｜DSML｜ parameter name=\"city\" string=\"true\">Paris, \"north\"</｜DSML｜ parameter>\n"
    "<｜DSML｜ parameter name=\"days\" string=\"false\">[1, 2]</｜DSML｜ parameter>\n"
    "</｜DSML｜ invoke>\n"
    "<｜DSML｜ invoke name=\"search\">\n"
    "<｜DSML｜ parameter name=\"q\" string=\"true\">42</｜DSML｜ parameter>\n"
    "</｜DSML｜ invoke>\n"
    "</｜DSML｜ calls>";

}  // namespace

TEST_CASE("dsml: generated calls become tool calls with string true and false values", "[tokenizer][dsml]") {
  const ParsedToolCalls parsed = parse_tool_calls(*dsml_format().tools, kTwoCalls, "call_");
  CHECK(parsed.content == "Let me check.");
  REQUIRE(parsed.calls.size() == 2);
  CHECK(parsed.calls[0].id == "call_0");
  CHECK(parsed.calls[0].name == "get_weather");
  CHECK(parsed.calls[0].arguments == R"({"city":"Paris, \"north\"","days":[1,2]})");
  CHECK(parsed.calls[1].id == "call_1");
  CHECK(parsed.calls[1].name == "search");
  CHECK(parsed.calls[1].arguments == R"({"q":"42"})");

  // Streamed a byte at a time: the same content and calls.
  ToolCallParser parser(*dsml_format().tools, "call_");
  std::vector<ToolCallEvent> events;
  for (const char c : kTwoCalls) {
    for (ToolCallEvent& e : parser.push(std::string_view(&c, 1))) events.push_back(std::move(e));
  }
  for (ToolCallEvent& e : parser.finish()) events.push_back(std::move(e));
  std::string content;
  std::vector<std::string> names, arguments;
  for (const ToolCallEvent& e : events) {
    if (e.kind == ToolCallEvent::Kind::content) content += e.text;
    if (e.kind == ToolCallEvent::Kind::call_start) names.push_back(e.name);
    if (e.kind == ToolCallEvent::Kind::arguments) arguments.push_back(e.text);
  }
  CHECK(content == "Let me check.");
  CHECK(names == std::vector<std::string>{"get_weather", "search"});
  CHECK(arguments == std::vector<std::string>{R"({"city":"Paris, \"north\"","days":[1,2]})", R"({"q":"42"})"});
}

TEST_CASE("dsml: a rendered call reads back to its arguments", "[tokenizer][dsml]") {
  const ChatToolMarkup& markup = *dsml_format().tools;
  const ChatToolCall call{"x", "f", R"({"path": "a b", "n": 1.5, "flags": {"deep": true}, "none": null})"};
  const std::string invoke = dsml_invoke(markup, call);
  CHECK(invoke ==
        "<｜DSML｜ invoke name=\"f\">\n"
        "<｜DSML｜ parameter name=\"path\" string=\"true\">a b</｜DSML｜ parameter>\n"
        "<｜DSML｜ parameter name=\"n\" string=\"false\">1.5</｜DSML｜ parameter>\n"
        "<｜DSML｜ parameter name=\"flags\" string=\"false\">{\"deep\": true}</｜DSML｜ parameter>\n"
        "<｜DSML｜ parameter name=\"none\" string=\"false\">null</｜DSML｜ parameter>\n"
        "</｜DSML｜ invoke>");
  const ParsedToolCalls parsed =
      parse_tool_calls(markup, "\n\n<｜DSML｜ calls>\n" + invoke + "\n</｜DSML｜ calls>", "id");
  REQUIRE(parsed.calls.size() == 1);
  CHECK(parsed.content.empty());
  CHECK(nlohmann::json::parse(parsed.calls[0].arguments) == nlohmann::json::parse(call.arguments));
}

TEST_CASE("dsml: malformed call markup is given back as text", "[tokenizer][dsml]") {
  const ChatToolMarkup& markup = *dsml_format().tools;
  const std::string not_json =
      "A\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"
      "<｜DSML｜ parameter name=\"x\" string=\"false\">[1,</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  ParsedToolCalls parsed = parse_tool_calls(markup, not_json, "c");
  CHECK(parsed.calls.empty());
  CHECK(parsed.content == not_json);

  const std::string unterminated = "B\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"x\" string=\"true\">1";
  parsed = parse_tool_calls(markup, unterminated, "c");
  CHECK(parsed.calls.empty());
  CHECK(parsed.content == unterminated);

  const std::string no_invoke = "C\n\n<｜DSML｜ calls>\nhello";
  parsed = parse_tool_calls(markup, no_invoke, "c");
  CHECK(parsed.calls.empty());
  CHECK(parsed.content == no_invoke);

  CHECK(parse_dsml_invoke(" name=\"f\">\n<｜DSML｜ parameter name=\"x\" string=\"maybe\">1</｜DSML｜ parameter>\n")
            .error()
            .message == "DSML invoke \"f\": parameter \"x\" has string= other than \"true\" or \"false\"");
  CHECK(parse_dsml_invoke(" name=\"f\">\n<｜DSML｜ parameter name=\"x\" string=\"true\">1</｜DSML｜ parameter>\n"
                          "<｜DSML｜ parameter name=\"x\" string=\"true\">2</｜DSML｜ parameter>\n")
            .error()
            .message == "DSML invoke \"f\": parameter name \"x\" is empty or repeated");
  CHECK(parse_dsml_invoke(" name=\"f\">\nstray<｜DSML｜ parameter name=\"x\" string=\"true\">1</｜DSML｜ parameter>")
            .error()
            .message == "DSML invoke \"f\": text outside a parameter");
  CHECK(parse_dsml_invoke(">\n").error().message == "DSML invoke: expected name=\"…\" after the invoke marker");
  CHECK(parse_dsml_invoke(" name=\"\">\n").error().message == "DSML invoke: the function name is empty or not a name");
}

TEST_CASE("dsml: chat.json keys are checked", "[tokenizer][dsml]") {
  CHECK(ChatFormat::parse(R"({"encoding": "jinja"})", "x.json").error().message ==
        "x.json: \"encoding\" must be \"affixes\" or \"dsml\"");
  CHECK(ChatFormat::parse(R"({"encoding": "dsml", "user": ["<u>", ""]})", "x.json").error().message ==
        "x.json: the dsml encoding needs a \"think\" pair");
  CHECK(ChatFormat::parse(R"({"think": ["<t>", "</t>"], "tools": {"style": "dsml", "declare": ["", "{tools}", ""],)"
                          R"( "section": ["<s>", "</s>"], "call": ["<c", "</c>"]}})",
                          "x.json")
            .error()
            .message == "x.json: the dsml tools style and the dsml encoding go together");
  const ChatFormat& format = dsml_format();
  CHECK(format.encoding == ChatEncoding::dsml);
  REQUIRE(format.tools);
  CHECK(format.tools->style == ToolCallStyle::dsml);
}

TEST_CASE("dsml: waste convert writes DeepSeek-V4.1's chat.json as configs ships it", "[tokenizer][dsml]") {
  const std::string text = convert::chat_format_for("DeepseekV41ForCausalLM");
  REQUIRE_FALSE(text.empty());
  CHECK(convert::chat_format_for("deepseek_v41") == text);
  std::ifstream file(std::filesystem::path(WASTE_SOURCE_DIR) / "configs" / "chat" / "deepseek-v4.1.json",
                     std::ios::binary);
  const std::string shipped((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  CHECK(text == shipped);
  const auto parsed = ChatFormat::parse(text, "shipped");
  REQUIRE(parsed.has_value());
  CHECK(parsed->encoding == ChatEncoding::dsml);
}

}  // namespace waste

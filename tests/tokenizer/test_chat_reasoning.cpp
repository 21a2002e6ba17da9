// chat.json's reasoning keys (prelude, stop, think, think_history, effort, image) and the glm tools
// style: parsing with exact refusals, prompts against hand-written segments, the reasoning split
// over every way a reply can be cut into tokens, and GLM tool-call markup read back.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "compute/convert/tokenizer_files.hpp"
#include "compute/prompt/chat_format.hpp"
#include "compute/prompt/constraint_builder.hpp"
#include "compute/prompt/reasoning_split.hpp"
#include "compute/prompt/tool_call_parser.hpp"
#include "tests/tokenizer/test_support.hpp"

using waste::ChatFormat;
using waste::ChatMessage;
using waste::ChatRender;
using waste::ChatRole;
using waste::ChatSegment;
using waste::ReasoningPiece;
using waste::ReasoningSplit;
using waste::Tokenizer;

namespace {

const std::filesystem::path kConfigs = std::filesystem::path(WASTE_SOURCE_DIR) / "configs" / "chat";

ChatFormat load(const char* name) {
  auto format = ChatFormat::load(kConfigs / name);
  REQUIRE(format.has_value());
  return std::move(*format);
}

std::string parse_error(const std::string& text) {
  auto format = ChatFormat::parse(text, "c.json");
  REQUIRE_FALSE(format.has_value());
  return format.error().message;
}

ChatSegment M(std::string text) { return {std::move(text), true}; }
ChatSegment P(std::string text) { return {std::move(text), false}; }

// GLM's specials (ids of our own choosing above the byte ranks).
Tokenizer glm_like() {
  std::vector<waste::Special> specials = {
      {300, "[gMASK]"},      {301, "<sop>"},         {302, "<|system|>"},   {303, "<|user|>"},
      {304, "<|assistant|>"}, {305, "<|observation|>"}, {306, "<think>"},      {307, "</think>"},
      {308, "<tool_call>"},  {309, "</tool_call>"},  {310, "<arg_key>"},    {311, "</arg_key>"},
      {312, "<arg_value>"},  {313, "</arg_value>"},  {314, "<tool_response>"}, {315, "</tool_response>"},
      {316, "<|endoftext|>"}};
  auto tok = Tokenizer::from_ranks(waste::test::rank_file({"Hi", "Ma"}), std::move(specials));
  REQUIRE(tok.has_value());
  tok->set_eos(316);
  return std::move(*tok);
}

}  // namespace

TEST_CASE("chat.json reasoning keys parse", "[tokenizer]") {
  const ChatFormat glm = load("glm-5.json");
  CHECK(glm.prelude == "[gMASK]<sop>");
  CHECK(glm.stop == "<|user|>");
  CHECK(glm.stop_text() == "<|user|>");
  REQUIRE(glm.think.has_value());
  CHECK(glm.think->prefix == "<think>");
  CHECK(glm.think->suffix == "</think>");
  CHECK(glm.think_history == waste::ThinkHistory::keep);
  REQUIRE(glm.effort.has_value());
  CHECK(glm.effort->turn == "<|system|>Reasoning Effort: {effort}");
  CHECK(glm.effort->fallback == "max");
  CHECK(glm.effort->levels ==
        std::vector<std::pair<std::string, std::string>>{{"high", "High"}, {"low", "Low"}, {"max", "Max"}});
  CHECK_FALSE(glm.effort->range.has_value());
  CHECK(glm.image == "<|begin_of_image|><|image|><|end_of_image|>");
  REQUIRE(glm.tools.has_value());
  CHECK(glm.tools->style == waste::ToolCallStyle::glm);

  const ChatFormat k2 = load("kimi-k2-thinking.json");
  CHECK(k2.think_history == waste::ThinkHistory::current);
  CHECK(k2.stop_text() == "<|im_end|>");  // no "stop": the assistant suffix

  auto numeric = ChatFormat::parse(R"({"effort": {"turn": "<s>budget {effort}</s>", "range": [0, 100]}})", "c.json");
  REQUIRE(numeric.has_value());
  REQUIRE(numeric->effort->range.has_value());
  CHECK(*numeric->effort->range == std::pair<long long, long long>{0, 100});
  // A format without the keys has none of them.
  auto plain = ChatFormat::parse(R"({"user": ["U:", "\n"]})", "c.json");
  REQUIRE(plain.has_value());
  CHECK_FALSE(plain->think.has_value());
  CHECK_FALSE(plain->effort.has_value());
  CHECK(plain->prelude.empty());
}

TEST_CASE("chat.json reasoning keys refuse every bad shape with an exact message", "[tokenizer]") {
  CHECK(parse_error(R"({"thinking": ["a", "b"]})") ==
        "c.json: unknown key \"thinking\" (expected encoding, prelude, system, user, assistant, open, stop, think, "
        "think_history, effort, image, tools)");
  CHECK(parse_error(R"({"prelude": 1})") == "c.json: \"prelude\" must be a string");
  CHECK(parse_error(R"({"stop": ["<|user|>"]})") == "c.json: \"stop\" must be a string");
  CHECK(parse_error(R"({"image": null})") == "c.json: \"image\" must be a string");
  CHECK(parse_error(R"({"prelude": ")" + std::string(128, 'x') + R"("})") ==
        "c.json: \"prelude\" is 128 bytes; at most 127 are allowed");
  const std::string think_shape = "c.json: \"think\" must be an array of two non-empty strings [open, close]";
  CHECK(parse_error(R"({"think": "<think>"})") == think_shape);
  CHECK(parse_error(R"({"think": ["<think>"]})") == think_shape);
  CHECK(parse_error(R"({"think": ["<think>", ""]})") == think_shape);
  CHECK(parse_error(R"({"think": ["<think>", 3]})") == think_shape);
  CHECK(parse_error(R"({"think": ["<think>", ")" + std::string(128, 'x') + R"("]})") ==
        "c.json: \"think\"[1] is 128 bytes; at most 127 are allowed");
  CHECK(parse_error(R"({"think_history": "keep"})") == "c.json: \"think_history\" needs a \"think\" pair");
  CHECK(parse_error(R"({"think": ["a", "b"], "think_history": "all"})") ==
        "c.json: \"think_history\" must be \"current\" or \"keep\"");
  CHECK(parse_error(R"({"effort": "High"})") == "c.json: \"effort\" must be an object");
  CHECK(parse_error(R"({"effort": {"turn": "{effort}", "levels": {"low": "L"}, "max": 3}})") ==
        "c.json: \"effort\": unknown key \"max\" (expected turn, levels, range, default)");
  CHECK(parse_error(R"({"effort": {"turn": "Effort: high", "levels": {"low": "L"}}})") ==
        "c.json: \"effort\": \"turn\" must hold {effort} where the level goes");
  CHECK(parse_error(R"({"effort": {"turn": 5, "levels": {"low": "L"}}})") == "c.json: \"effort\": \"turn\" must be a string");
  CHECK(parse_error(R"({"effort": {"turn": "{effort}"}})") ==
        "c.json: \"effort\" needs \"levels\" or \"range\" (what a request may ask for)");
  CHECK(parse_error(R"({"effort": {"turn": "{effort}", "levels": ["low"]}})") ==
        "c.json: \"effort\": \"levels\" must be an object of level names to their text");
  CHECK(parse_error(R"({"effort": {"turn": "{effort}", "levels": {"low": ""}}})") ==
        "c.json: \"effort\": \"levels\".\"low\" must be a non-empty string under a non-empty name");
  CHECK(parse_error(R"({"effort": {"turn": "{effort}", "range": [5, 1]}})") ==
        "c.json: \"effort\": \"range\" must be [min, max], two whole numbers with min <= max");
  CHECK(parse_error(R"({"effort": {"turn": "{effort}", "range": [0.5, 1]}})") ==
        "c.json: \"effort\": \"range\" must be [min, max], two whole numbers with min <= max");
  CHECK(parse_error(R"({"effort": {"turn": "{effort}", "levels": {"low": "L"}, "default": "high"}})") ==
        "c.json: \"effort\": \"default\" must name one of \"levels\"");
  CHECK(parse_error(R"({"tools": {"style": "xml", "call": ["<a>", "</a>"]}})") ==
        "c.json: \"tools\": \"style\" must be \"kimi\", \"json\", \"glm\" or \"dsml\"");
}

TEST_CASE("GLM prompt: prelude, effort turn, kept reasoning, opened think, byte for byte", "[tokenizer]") {
  const ChatFormat glm = load("glm-5.json");
  std::vector<ChatMessage> messages = {{ChatRole::system, "Be brief."},
                                       {ChatRole::user, "Hi"},
                                       {ChatRole::assistant, "Hello."},
                                       {ChatRole::user, "Again"}};
  messages[2].reasoning = "greet back";
  ChatRender options;
  const auto segments = waste::render_chat(glm, messages, options);
  CHECK(segments == std::vector<ChatSegment>{M("[gMASK]<sop>"), M("<|system|>Reasoning Effort: Max"), M("<|system|>"),
                                             P("Be brief."), M("<|user|>"), P("Hi"), M("<|assistant|>"), M("<think>"),
                                             P("greet back"), M("</think>"), P("Hello."), M("<|user|>"), P("Again"),
                                             M("<|assistant|>"), M("<think>")});
  // A named level, and a constrained answer's closed pair.
  options.effort = "Low";
  options.thinking = false;
  const auto low = waste::render_chat(glm, std::span(messages).subspan(3), options);
  CHECK(low == std::vector<ChatSegment>{M("[gMASK]<sop>"), M("<|system|>Reasoning Effort: Low"), M("<|user|>"),
                                        P("Again"), M("<|assistant|>"), M("<think>"), M("</think>")});
  // Not the start of the conversation (waste chat's later turns): no prelude, no effort turn.
  ChatRender later;
  later.start = false;
  later.open_model_turn = false;
  CHECK(waste::render_chat(glm, std::span(messages).subspan(1, 1), later) == std::vector<ChatSegment>{M("<|user|>"), P("Hi")});

  const Tokenizer tok = glm_like();
  const auto ids = waste::build_chat_prompt(tok, glm, std::span(messages).subspan(1, 1), ChatRender{});
  std::vector<int> want = {300, 301, 302};
  tok.encode("Reasoning Effort: Max", want);
  want.push_back(303);
  tok.encode("Hi", want);
  want.insert(want.end(), {304, 306});
  CHECK(ids == want);
  const waste::ChatStop stop = waste::chat_stop(tok, glm);
  CHECK(stop.text == "<|user|>");
  CHECK(stop.ids == std::vector<int>{316, 303, 305});  // eos, the next user turn, a tool-result turn
}

TEST_CASE("Kimi-K2-Thinking prompt drops reasoning before the last answer", "[tokenizer]") {
  const ChatFormat k2 = load("kimi-k2-thinking.json");
  std::vector<ChatMessage> messages = {{ChatRole::user, "Q1"},
                                       {ChatRole::assistant, "A1"},
                                       {ChatRole::user, "Q2"},
                                       {ChatRole::assistant, ""},
                                       {ChatRole::tool, "42"}};
  messages[1].reasoning = "old thoughts";
  messages[3].reasoning = "call it";
  messages[3].tool_calls = {{"functions.f:0", "f", "{}"}};
  messages[4].tool_call_id = "functions.f:0";
  const auto segments = waste::render_chat(k2, messages, ChatRender{});
  CHECK(segments ==
        std::vector<ChatSegment>{
            M("<|im_user|>user<|im_middle|>"), P("Q1"), M("<|im_end|>"),
            M("<|im_assistant|>assistant<|im_middle|>"), M("<think>"), M("</think>"), P("A1"), M("<|im_end|>"),
            M("<|im_user|>user<|im_middle|>"), P("Q2"), M("<|im_end|>"),
            M("<|im_assistant|>assistant<|im_middle|>"), M("<think>"), P("call it"), M("</think>"),
            M("<|tool_calls_section_begin|>"), M("<|tool_call_begin|>"), P("functions.f:0"),
            M("<|tool_call_argument_begin|>"), P("{}"), M("<|tool_call_end|>"), M("<|tool_calls_section_end|>"),
            M("<|im_end|>"), M("<|im_system|>"), P("f"), M("<|im_middle|>## Return of "), P("functions.f:0"),
            M("\n"), P("42"), M("<|im_end|>"), M("<|im_assistant|>assistant<|im_middle|>"), M("<think>")});
}

TEST_CASE("A format without think renders as before and ignores reasoning", "[tokenizer]") {
  const ChatFormat k2 = load("kimi-k2.json");
  std::vector<ChatMessage> messages = {{ChatRole::user, "Q"}, {ChatRole::assistant, "A"}};
  messages[1].reasoning = "hidden";
  CHECK(waste::render_chat(k2, messages, ChatRender{}) ==
        std::vector<ChatSegment>{M("<|im_user|>user<|im_middle|>"), P("Q"), M("<|im_end|>"),
                                 M("<|im_assistant|>assistant<|im_middle|>"), P("A"), M("<|im_end|>"),
                                 M("<|im_assistant|>assistant<|im_middle|>")});
}

TEST_CASE("Reasoning effort resolves against the format or is refused exactly", "[tokenizer]") {
  const ChatFormat glm = load("glm-5.json");
  CHECK(waste::resolve_effort(glm, "high", false).value() == "High");
  CHECK(waste::resolve_effort(glm, "", false).value() == "Max");  // the format's default
  CHECK(waste::resolve_effort(glm, "medium", false).error().message ==
        "must be one of high, low, max for this model, not \"medium\"");
  CHECK(waste::resolve_effort(glm, "7", true).error().message ==
        "must be one of high, low, max for this model, not 7");
  auto numeric = ChatFormat::parse(R"({"effort": {"turn": "budget {effort}", "range": [0, 100]}})", "c.json");
  REQUIRE(numeric.has_value());
  CHECK(waste::resolve_effort(*numeric, "40", true).value() == "40");
  CHECK(waste::resolve_effort(*numeric, "", false).value().empty());  // no default: no turn
  CHECK(waste::resolve_effort(*numeric, "101", true).error().message ==
        "must be a whole number from 0 to 100 for this model, not 101");
  CHECK(waste::resolve_effort(*numeric, "high", false).error().message ==
        "must be a whole number from 0 to 100 for this model, not \"high\"");
  ChatRender options;
  options.effort = "40";
  CHECK(waste::render_chat(*numeric, {}, options) == std::vector<ChatSegment>{M("budget 40")});
  CHECK(waste::render_chat(*numeric, {}, ChatRender{}).empty());
  const ChatFormat k2 = load("kimi-k2.json");
  CHECK(waste::resolve_effort(k2, "high", false).error().message ==
        "this model's chat format has no reasoning effort (\"effort\" in chat.json)");
}

TEST_CASE("Reasoning split finds the markers however the reply is cut", "[tokenizer]") {
  const waste::ChatAffixes pair{"<think>", "</think>"};
  const std::string reply = "<think>Let me see: 2+2.</think>It is 4.";
  // Every cut into three pieces (markers straddling the boundaries included).
  for (std::size_t a = 0; a <= reply.size(); ++a) {
    for (std::size_t b = a; b <= reply.size(); ++b) {
      ReasoningSplit split(pair, true);
      ReasoningPiece got;
      for (const std::string_view piece : {std::string_view(reply).substr(0, a), std::string_view(reply).substr(a, b - a),
                                           std::string_view(reply).substr(b)}) {
        const ReasoningPiece p = split.push(piece);
        // Nothing of a marker is ever released.
        CHECK(p.reasoning.find('<') == std::string::npos);
        CHECK(p.content.find('<') == std::string::npos);
        got.reasoning += p.reasoning;
        got.content += p.content;
      }
      const ReasoningPiece tail = split.finish();
      got.reasoning += tail.reasoning;
      got.content += tail.content;
      INFO(a << " " << b);
      CHECK(got == ReasoningPiece{"Let me see: 2+2.", "It is 4."});
    }
  }
  // Without the repeated open marker (the prompt opened it), and the reasoning released early.
  ReasoningSplit split(pair, true);
  CHECK(split.push("thinking </th") == ReasoningPiece{"thinking ", ""});
  CHECK(split.in_reasoning());
  CHECK(split.push("ink>done") == ReasoningPiece{"", "done"});
  CHECK_FALSE(split.in_reasoning());
  CHECK(split.push("</think> more") == ReasoningPiece{"", "</think> more"});  // after the close: all content
  // A reply that never closes its reasoning is all reasoning, held text included.
  CHECK(waste::split_reasoning(pair, "still thinking </thi") == ReasoningPiece{"still thinking </thi", ""});
  // Not inside (a constrained answer): all content.
  CHECK(waste::split_reasoning(pair, "<think>x</think>y", false) == ReasoningPiece{"", "<think>x</think>y"});
  // A marker of several tokens (K3's close), cut anywhere.
  const waste::ChatAffixes k3{"<|open|>think<|sep|>", "<|close|>think<|sep|><|open|>response<|sep|>"};
  CHECK(waste::split_reasoning(k3, "hmm<|close|>think<|sep|><|open|>response<|sep|>ok") == ReasoningPiece{"hmm", "ok"});
}

TEST_CASE("GLM tool calls render in history and declarations as GLM's template writes them", "[tokenizer]") {
  const ChatFormat glm = load("glm-5.json");
  std::vector<ChatMessage> messages = {{ChatRole::user, "Weather?"}, {ChatRole::assistant, ""}, {ChatRole::tool, "sunny"}};
  messages[1].tool_calls = {{"call_1", "get_weather", R"({"city":"Rome","days":2,"opts":{"a":[1,true]}})"}};
  messages[2].tool_call_id = "call_1";
  ChatRender options;
  options.tools_json =
      R"([{"function":{"description":"Weather now","name":"get_weather","parameters":{"properties":{"city":{"type":"string"}},"type":"object"},"strict":true},"type":"function"}])";
  options.effort = "High";
  const auto segments = waste::render_chat(glm, messages, options);
  CHECK(segments ==
        std::vector<ChatSegment>{
            M("[gMASK]<sop>"), M("<|system|>Reasoning Effort: High"), M("<|system|>"),
            M("\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
              "function signatures within <tools></tools> XML tags:\n<tools>\n"),
            P(R"({"description": "Weather now", "name": "get_weather", "parameters": {"properties": {"city": {"type": "string"}}, "type": "object"}})"
              "\n"),
            M("</tools>\n\nFor each function call, output the function name and arguments within the following XML "
              "format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>"
              "<arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>"),
            M("<|user|>"), P("Weather?"), M("<|assistant|>"), M("<think>"), M("</think>"), M("<tool_call>"),
            P("get_weather"), M("<arg_key>"), P("city"), M("</arg_key><arg_value>"), P("Rome"), M("</arg_value>"),
            M("<arg_key>"), P("days"), M("</arg_key><arg_value>"), P("2"), M("</arg_value>"), M("<arg_key>"), P("opts"),
            M("</arg_key><arg_value>"), P(R"({"a": [1, true]})"), M("</arg_value>"), M("</tool_call>"),
            M("<|observation|><tool_response>"), P("sunny"), M("</tool_response>"), M("<|assistant|>"), M("<think>")});
}

TEST_CASE("GLM tool-call markup parses into calls, malformed calls fall back to content", "[tokenizer]") {
  const ChatFormat glm = load("glm-5.json");
  const auto& markup = *glm.tools;
  const std::string reply = "Checking.<tool_call>get_weather<arg_key>city</arg_key><arg_value>New York</arg_value>"
                            "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call><tool_call>noop</tool_call>";
  const auto parsed = waste::parse_tool_calls(markup, reply, "call_x_");
  CHECK(parsed.content == "Checking.");
  REQUIRE(parsed.calls.size() == 2);
  CHECK(parsed.calls[0].id == "call_x_0");
  CHECK(parsed.calls[0].name == "get_weather");
  CHECK(parsed.calls[0].arguments == R"({"city":"New York","days":3})");
  CHECK(parsed.calls[1].name == "noop");
  CHECK(parsed.calls[1].arguments == "{}");
  // Streamed in pieces of every size: the same calls, nothing of the markup as content.
  for (std::size_t step = 1; step <= 7; ++step) {
    waste::ToolCallParser parser(markup, "call_x_");
    std::vector<waste::ToolCallEvent> events;
    for (std::size_t at = 0; at < reply.size(); at += step) {
      for (auto& e : parser.push(std::string_view(reply).substr(at, step))) events.push_back(std::move(e));
    }
    for (auto& e : parser.finish()) events.push_back(std::move(e));
    std::string content, arguments;
    int starts = 0;
    for (const auto& e : events) {
      if (e.kind == waste::ToolCallEvent::Kind::content) content += e.text;
      if (e.kind == waste::ToolCallEvent::Kind::call_start) ++starts;
      if (e.kind == waste::ToolCallEvent::Kind::arguments) arguments += e.text;
    }
    INFO(step);
    CHECK(content == "Checking.");
    CHECK(starts == 2);
    CHECK(arguments == R"({"city":"New York","days":3}{})");
  }
  // Malformed: given back as content, markers included.
  for (const std::string bad : {"<tool_call>\n<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>",  // no name
                                "<tool_call>f<arg_key>k</arg_key>junk<arg_value>v</arg_value></tool_call>",
                                "<tool_call>f<arg_key>k</arg_key><arg_value>1</arg_value><arg_key>k</arg_key>"
                                "<arg_value>2</arg_value></tool_call>",  // a repeated key
                                "<tool_call>f<arg_key>k</arg_key><arg_value>v</tool_call>",
                                "<tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value>"}) {  // never closed
    INFO(bad);
    const auto p = waste::parse_tool_calls(markup, "x" + bad + "y", "c_");
    CHECK(p.calls.empty());
    CHECK(p.content == "x" + bad + "y");
  }
}

TEST_CASE("A glm chat.json whose declare has no body renders the shipped glm-5.json body", "[tokenizer]") {
  // A container converted before the body was a key: its chat.json has declare [prefix, suffix].
  const std::string old_format = R"({"system": ["<|system|>", ""], "user": ["<|user|>", ""],
    "assistant": ["<|assistant|>", ""], "tools": {"style": "glm", "declare": ["<|system|>", ""],
    "call": ["<tool_call>", "</tool_call>"], "result": ["<|observation|><tool_response>", "</tool_response>"]}})";
  auto old = ChatFormat::parse(old_format, "old.json");
  REQUIRE(old.has_value());
  CHECK(old->tools->declare_body.empty());
  const ChatFormat shipped = load("glm-5.json");
  CHECK(shipped.tools->declare_body == waste::shipped_glm_declare_body());
  const std::vector<ChatMessage> messages = {{ChatRole::user, "U"}};
  ChatRender options;
  options.tools_json = R"([{"function":{"name":"f","parameters":{"type":"object"}},"type":"function"}])";
  options.start = true;
  const auto segments = waste::render_chat(*old, messages, options);
  CHECK(segments ==
        std::vector<ChatSegment>{
            M("<|system|>"),
            M("\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
              "function signatures within <tools></tools> XML tags:\n<tools>\n"),
            P(R"({"name": "f", "parameters": {"type": "object"}})" "\n"),
            M("</tools>\n\nFor each function call, output the function name and arguments within the following XML "
              "format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>"
              "<arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>"),
            M("<|user|>"), P("U"), M("<|assistant|>")});
  // A body of {tools} alone: the list without instructions.
  std::string bare = old_format;
  bare.replace(bare.find(R"("declare": ["<|system|>", ""])"), 29, R"("declare": ["<|system|>", "{tools}", ""])");
  auto plain = ChatFormat::parse(bare, "bare.json");
  REQUIRE(plain.has_value());
  CHECK(waste::render_chat(*plain, messages, options) ==
        std::vector<ChatSegment>{M("<|system|>"), P(R"({"name": "f", "parameters": {"type": "object"}})" "\n"),
                                 M("<|user|>"), P("U"), M("<|assistant|>")});
}

TEST_CASE("chat.json declare as [prefix, body, suffix]: the tool list at {tools}, exact refusals", "[tokenizer]") {
  const std::string head = R"({"user": ["<u>", "</u>"], "tools": {"style": "json", "call": ["<c>", "</c>"], "declare": )";
  auto json_style = ChatFormat::parse(head + R"(["<s>", "Tools:\n{tools}\nUse them.", "</s>"]}})", "c.json");
  REQUIRE(json_style.has_value());
  ChatRender options;
  options.tools_json = R"([{"type":"function"}])";
  options.open_model_turn = false;
  CHECK(waste::render_chat(*json_style, std::vector<ChatMessage>{}, options) ==
        std::vector<ChatSegment>{M("<s>"), M("Tools:\n"), P(R"([{"type":"function"}])"), M("\nUse them."), M("</s>")});
  // Without a body, as before: the tools array alone.
  auto pair = ChatFormat::parse(head + R"(["<s>", "</s>"]}})", "c.json");
  REQUIRE(pair.has_value());
  CHECK(waste::render_chat(*pair, std::vector<ChatMessage>{}, options) ==
        std::vector<ChatSegment>{M("<s>"), P(R"([{"type":"function"}])"), M("</s>")});
  // The body may be longer than a field (the reference engine never reads it); affixes may not.
  CHECK(ChatFormat::parse(head + "[\"<s>\", \"" + std::string(300, 'x') + "{tools}\", \"\"]}}", "c.json").has_value());
  CHECK(parse_error(head + R"(["<s>", "no placeholder", ""]}})") ==
        "c.json: \"tools\": \"declare\"[1] must hold {tools} once, where the tool list goes");
  CHECK(parse_error(head + R"(["<s>", "{tools}{tools}", ""]}})") ==
        "c.json: \"tools\": \"declare\"[1] must hold {tools} once, where the tool list goes");
  CHECK(parse_error(head + R"(["<s>", "{tools}", "", ""]}})") ==
        "c.json: \"tools\": \"declare\" must be an array of strings [prefix, suffix] or [prefix, body, suffix]");
  CHECK(parse_error(head + R"(["<s>", 1, ""]}})") ==
        "c.json: \"tools\": \"declare\" must be an array of strings [prefix, suffix] or [prefix, body, suffix]");
  CHECK(parse_error(head + "[\"" + std::string(128, 'p') + "\", \"{tools}\", \"\"]}}") ==
        "c.json: \"tools\": \"declare\"[0] is 128 bytes; at most 127 are allowed");
}

TEST_CASE("waste convert writes GLM's chat.json as configs ships it", "[tokenizer]") {
  const std::string text = waste::convert::chat_format_for("Glm5NextForConditionalGeneration");
  REQUIRE_FALSE(text.empty());
  CHECK(waste::convert::chat_format_for("glm5-next") == text);
  // Byte for byte the file (compiled in from it), its declaration body included.
  std::ifstream file(kConfigs / "glm-5.json", std::ios::binary);
  const std::string shipped_text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  CHECK(text == shipped_text);
  CHECK(text.find("{tools}</tools>") != std::string::npos);
  auto converted = ChatFormat::parse(text, "converted");
  REQUIRE(converted.has_value());
  const ChatFormat shipped = load("glm-5.json");
  const std::vector<ChatMessage> messages = {{ChatRole::system, "S"}, {ChatRole::user, "U"}};
  ChatRender options;
  options.tools_json = R"([{"function":{"name":"f"},"type":"function"}])";
  CHECK(waste::render_chat(*converted, messages, options) == waste::render_chat(shipped, messages, options));
  CHECK(converted->stop == shipped.stop);
  CHECK(converted->image == shipped.image);
  CHECK(waste::convert::missing_markers(text, {"<|system|>", "<|user|>", "<|assistant|>", "<|begin_of_image|>",
                                               "<|image|>", "<|end_of_image|>", "<|observation|>"})
            .empty());
}

TEST_CASE("Kimi-K3 thinking format: think block before the response channel, reasoning kept", "[tokenizer]") {
  const ChatFormat k3 = load("kimi-k3-thinking.json");
  std::vector<ChatMessage> messages = {{ChatRole::user, "Q"}, {ChatRole::assistant, "A"}, {ChatRole::user, "Q2"}};
  messages[1].reasoning = "R";
  std::string text;
  for (const ChatSegment& s : waste::render_chat(k3, messages, ChatRender{})) text += s.text;
  CHECK(text ==
        "<|open|>message role=\"user\"<|sep|>Q<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>R<|close|>think<|sep|><|open|>response<|sep|>A"
        "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"user\"<|sep|>Q2<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>");
  // The reply ends at its response channel's close; <|close|> alone is no stop id (it also closes
  // the reasoning).
  CHECK(k3.stop_text() == "<|close|>response<|sep|>");
  std::vector<waste::Special> specials = {{300, "<|open|>"}, {301, "<|close|>"}, {302, "<|sep|>"}, {303, "<|end_of_msg|>"}};
  auto tok = Tokenizer::from_ranks(waste::test::rank_file({}), std::move(specials));
  REQUIRE(tok.has_value());
  tok->set_eos(303);
  CHECK(waste::chat_stop(*tok, k3).ids == std::vector<int>{303});
  CHECK(waste::chat_stop(*tok, load("kimi-k3.json")).ids == std::vector<int>{303, 301});  // no think pair: it stops
}

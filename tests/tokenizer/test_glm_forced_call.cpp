// Forced tool calls in GLM's flat markup (compute/prompt/glm_call_plan.*), driven token by token
// through ConstraintState: the exact bytes of a named call with GLM's markers as special tokens
// and as plain text, what the mask allows inside a raw string value (never a text the parser
// would read as another JSON value, never a close marker), the call read back by the parser into
// schema-valid arguments, "required" choosing among tools, and the exact refusals.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/prompt/chat_format.hpp"
#include "compute/prompt/constraint_builder.hpp"
#include "compute/prompt/glm_call_plan.hpp"
#include "compute/prompt/output_constraint.hpp"
#include "compute/prompt/tool_call_parser.hpp"
#include "tests/tokenizer/test_support.hpp"

namespace waste {
namespace {

using nlohmann::json;

ChatFormat glm_format() {
  auto format = ChatFormat::load(std::filesystem::path(WASTE_SOURCE_DIR) / "configs" / "chat" / "glm-5.json");
  REQUIRE(format.has_value());
  return std::move(*format);
}

// Bytes as tokens (ranks 0..255), GLM's markers as specials when `specials`, eos 400.
Tokenizer glm_tokenizer(bool specials) {
  std::vector<Special> list = {{400, "<|endoftext|>"}, {401, "<|user|>"}};
  if (specials) {
    list.insert(list.end(), {{410, "<tool_call>"}, {411, "</tool_call>"}, {412, "<arg_key>"}, {413, "</arg_key>"},
                             {414, "<arg_value>"}, {415, "</arg_value>"}});
  }
  auto tok = Tokenizer::from_ranks(test::rank_file({}), std::move(list));
  REQUIRE(tok.has_value());
  tok->set_eos(400);
  return std::move(*tok);
}

ToolDef tool(const std::string& name, const std::string& parameters) {
  ToolDef t;
  t.name = name;
  t.parameters = json::parse(parameters);
  return t;
}

std::expected<std::shared_ptr<const ConstraintPlan>, PromptError> plan_for(const Tokenizer& tok,
                                                                            const std::vector<ToolDef>& tools,
                                                                            const std::string& named) {
  static const ChatFormat format = glm_format();
  auto index = grammar::build_token_index(tok, std::vector<int>{401});
  REQUIRE(index);
  OutputSpec spec;
  spec.tools = tools;
  spec.tool_choice = named.empty() ? ToolChoice::required : ToolChoice::named;
  spec.tool_choice_name = named;
  return make_constraint_plan(spec, format, tok, *index, {});
}

// One sequence through a plan: forced tokens taken as they come, chosen bytes checked against
// the mask before they are accepted; `text` is everything emitted.
struct Driver {
  const Tokenizer& tok;
  ConstraintState state;
  std::string text;

  Driver(const Tokenizer& t, std::shared_ptr<const ConstraintPlan> plan) : tok(t), state(std::move(plan)) {}

  std::vector<float> mask() {
    std::vector<float> logits(std::size_t(tok.vocab()), 0.0f);
    state.mask(logits);
    return logits;
  }
  bool allowed(int token) { return state.forced() < 0 && std::isfinite(mask()[std::size_t(token)]); }
  void take(int token) {
    REQUIRE(state.accept(token, tok.decode_token(token)));
    text += tok.decode_token(token);
  }
  void forced() {
    while (!state.done() && state.forced() >= 0) take(state.forced());
  }
  void bytes(const std::string& value) {
    for (const char c : value) {
      const int token = static_cast<unsigned char>(c);
      INFO("byte '" << c << "' after " << text);
      REQUIRE(allowed(token));
      take(token);
    }
  }
};

const std::string kWeather = R"({"type": "object", "required": ["city", "days", "unit", "opts"], "properties": {
  "city": {"type": "string", "description": "a city"}, "days": {"type": "integer", "minimum": 1, "maximum": 16},
  "unit": {"enum": ["celsius", "fahrenheit"]}, "opts": {"type": "object", "required": ["hourly"],
  "properties": {"hourly": {"type": "boolean"}}, "additionalProperties": false},
  "lang": {"type": "string"}}})";

}  // namespace

TEST_CASE("A forced GLM call with special-token markers writes GLM's markup and parses to schema-valid arguments",
          "[tokenizer][tools][glm]") {
  const Tokenizer tok = glm_tokenizer(true);
  auto plan = plan_for(tok, {tool("get_weather", kWeather)}, "get_weather");
  INFO((plan ? std::string() : plan.error().message));
  REQUIRE(plan);
  Driver d(tok, *plan);
  d.forced();
  CHECK(d.text == "<tool_call>get_weather<arg_key>city</arg_key><arg_value>");
  // A raw string: the close token only where the text cannot read back as another JSON value.
  CHECK(d.allowed(415));  // the empty string
  CHECK_FALSE(d.allowed(' '));
  CHECK_FALSE(d.allowed('{'));
  CHECK_FALSE(d.allowed('['));
  CHECK_FALSE(d.allowed(412));  // another marker: never inside a value
  d.bytes("New York");
  REQUIRE(d.allowed(415));
  d.take(415);
  d.forced();
  CHECK(d.text.ends_with("</arg_value><arg_key>days</arg_key><arg_value>"));
  CHECK_FALSE(d.allowed(415));  // no integer yet
  CHECK_FALSE(d.allowed('x'));
  d.bytes("1");
  CHECK(d.allowed(415));  // "1" is complete, "16" would be too
  CHECK(d.allowed('6'));
  CHECK_FALSE(d.allowed('7'));
  d.bytes("6");
  CHECK(d.state.forced() == 415);  // nothing may follow 16: the close is forced
  d.forced();
  d.bytes("fahrenheit");
  d.forced();
  d.bytes(R"({"hourly":true})");
  d.forced();
  CHECK(d.state.done());
  const std::string expected =
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>New York</arg_value><arg_key>days</arg_key>"
      "<arg_value>16</arg_value><arg_key>unit</arg_key><arg_value>fahrenheit</arg_value><arg_key>opts</arg_key>"
      "<arg_value>{\"hourly\":true}</arg_value></tool_call>";
  CHECK(d.text == expected);
  const ParsedToolCalls parsed = parse_tool_calls(*glm_format().tools, d.text, "call_");
  CHECK(parsed.content.empty());
  REQUIRE(parsed.calls.size() == 1);
  CHECK(parsed.calls[0].name == "get_weather");
  CHECK(json::parse(parsed.calls[0].arguments) ==
        json::parse(R"({"city": "New York", "days": 16, "unit": "fahrenheit", "opts": {"hourly": true}})"));
}

TEST_CASE("A raw GLM string value never reads back as a number, true, false or null, nor holds a close marker",
          "[tokenizer][tools][glm]") {
  const Tokenizer tok = glm_tokenizer(true);
  const std::vector<ToolDef> tools = {tool("note", R"({"type": "object", "required": ["text"],
                                                       "properties": {"text": {"type": "string"}}})")};
  auto fresh = [&] {
    auto plan = plan_for(tok, tools, "note");
    REQUIRE(plan);
    auto d = std::make_unique<Driver>(tok, *plan);
    d->forced();
    return d;
  };
  // Texts that would parse as JSON other than a string cannot end the value; one more character can.
  for (const std::string lookalike : {"12", "-3.5e+2", "0", "true", "false", "null", "7 \n", "null "}) {
    INFO(lookalike);
    auto d = fresh();
    d->bytes(lookalike);
    CHECK_FALSE(d->allowed(415));
    d->bytes("x");
    CHECK(d->allowed(415));
  }
  for (const std::string text : {"2026-12-02", "-", "1.", "tru", "nul", "01", "\"quoted\"", "a < b", "</arg_valu",
                                 "</tool_cal", "x{y}"}) {
    INFO(text);
    auto d = fresh();
    d->bytes(text);
    CHECK(d->allowed(415));
  }
  for (const std::string marker : {"</arg_value>", "</tool_call>"}) {
    auto d = fresh();
    d->bytes("a" + marker.substr(0, marker.size() - 1));
    CHECK_FALSE(d->allowed('>'));
    d->bytes("<" + marker.substr(0, marker.size() - 1) + "!");  // a restarted, broken marker is text
    CHECK(d->allowed(415));
  }
  // A stop id sampled where the value is complete ends it with the close token, not the call.
  auto d = fresh();
  d->bytes("ok");
  CHECK_FALSE(d->state.accept_stop());
  CHECK(d->state.forced() == 415);
  d->forced();
  CHECK(d->state.done());
  CHECK(d->text == "<tool_call>note<arg_key>text</arg_key><arg_value>ok</arg_value></tool_call>");
}

TEST_CASE("A forced GLM call with plain-text markers ends each value with the marker's text", "[tokenizer][tools][glm]") {
  const Tokenizer tok = glm_tokenizer(false);
  auto plan = plan_for(tok, {tool("get_weather", kWeather)}, "get_weather");
  INFO((plan ? std::string() : plan.error().message));
  REQUIRE(plan);
  Driver d(tok, *plan);
  d.forced();
  CHECK(d.text == "<tool_call>get_weather<arg_key>city</arg_key><arg_value>");
  d.bytes("Paris </arg_valu</arg_value>");
  d.forced();
  d.bytes("9</arg_value>");
  d.forced();
  d.bytes("celsius</arg_value>");
  d.forced();
  CHECK_FALSE(d.allowed('<'));  // an object first
  d.bytes(R"({"hourly":false}</arg_value>)");
  d.forced();
  CHECK(d.state.done());
  CHECK(d.text ==
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris </arg_valu</arg_value><arg_key>days</arg_key>"
        "<arg_value>9</arg_value><arg_key>unit</arg_key><arg_value>celsius</arg_value><arg_key>opts</arg_key>"
        "<arg_value>{\"hourly\":false}</arg_value></tool_call>");
  const ParsedToolCalls parsed = parse_tool_calls(*glm_format().tools, d.text, "call_");
  REQUIRE(parsed.calls.size() == 1);
  CHECK(json::parse(parsed.calls[0].arguments) ==
        json::parse(R"({"city": "Paris </arg_valu", "days": 9, "unit": "celsius", "opts": {"hourly": false}})"));
}

TEST_CASE("GLM tool_choice required: a grammar picks the name, that tool's arguments follow", "[tokenizer][tools][glm]") {
  const std::vector<ToolDef> tools = {
      tool("get_weather", kWeather), tool("ping", R"({"type": "object", "properties": {"x": {"type": "string"}}})"),
      tool("get_time", R"({"type": "object", "required": ["utc"], "properties": {"utc": {"type": "boolean"}}})")};
  for (const bool specials : {true, false}) {
    INFO("specials " << specials);
    const Tokenizer tok = glm_tokenizer(specials);
    const std::string end = specials ? "" : "</arg_value>";
    struct Case {
      std::string name, values, expected_arguments;
    };
    for (const Case& c : {Case{"get_time", "false" + end, R"({"utc": false})"}, Case{"ping", "", "{}"}}) {
      auto plan = plan_for(tok, tools, "");
      REQUIRE(plan);
      Driver d(tok, *plan);
      d.forced();
      CHECK(d.text == "<tool_call>");
      CHECK_FALSE(d.allowed('x'));
      d.bytes(c.name);
      d.forced();
      if (!c.values.empty()) {
        d.bytes(c.values);
        d.forced();
      }
      CHECK(d.state.done());
      const ParsedToolCalls parsed = parse_tool_calls(*glm_format().tools, d.text, "call_");
      INFO(d.text);
      REQUIRE(parsed.calls.size() == 1);
      CHECK(parsed.calls[0].name == c.name);
      CHECK(json::parse(parsed.calls[0].arguments) == json::parse(c.expected_arguments));
    }
    CHECK(plan_for(tok, tools, "ping").has_value());
  }
  // A name that begins another cannot be told from it: nothing but a special token follows it.
  const Tokenizer tok = glm_tokenizer(true);
  auto refused = plan_for(tok, {tool("get", "{}"), tool("get_time", "{}")}, "");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().param == "tool_choice");
  CHECK(refused.error().message == "'tool_choice': \"required\" in the glm tool-call markup needs tool names none of "
                                   "which begins another (\"get\" begins \"get_time\"); name the tool");
  CHECK(plan_for(tok, {tool("get", "{}"), tool("get_time", "{}")}, "get").has_value());
}

TEST_CASE("What a GLM call cannot force faithfully is refused naming the field", "[tokenizer][tools][glm]") {
  const Tokenizer tok = glm_tokenizer(true);
  struct Case {
    std::string parameters, param, message;
  };
  const std::string p = "tools[0].function.parameters";
  for (const Case& c : {
           Case{R"({"required": ["a"], "properties": {"a": {"type": "string", "maxLength": 3}}})", p + ".properties.a",
                "'" + p + ".properties.a': \"maxLength\" on a string cannot be enforced in the glm tool-call markup "
                          "(strings are written unquoted)"},
           Case{R"({"required": ["a"], "properties": {"a": {"type": ["string", "null"]}}})", p + ".properties.a",
                "'" + p + ".properties.a': a value that may be a string or another type cannot be forced in the glm "
                          "tool-call markup (strings are written unquoted, other values as JSON)"},
           Case{R"({"required": ["a"], "properties": {"a": {"anyOf": [{"type": "integer"}]}}})", p + ".properties.a",
                "'" + p + ".properties.a': a forced argument in the glm tool-call markup needs a \"type\" or an "
                          "\"enum\" (strings are written unquoted, other values as JSON)"},
           Case{R"({"required": ["a"], "properties": {"a": {"enum": ["x", "3"]}}})", p + ".properties.a",
                "'" + p + ".properties.a': the string \"3\" would read back as another JSON value in the glm "
                          "tool-call markup (strings are written unquoted)"},
           Case{R"({"required": ["a"], "properties": {"a": {"const": "x</tool_call>"}}})", p + ".properties.a",
                "'" + p + ".properties.a': the string \"x</tool_call>\" holds </tool_call>, which ends a value in "
                          "the glm tool-call markup"},
           Case{R"({"required": [" a"]})", p + ".required",
                "'" + p + ".required': the key \" a\" cannot be written between <arg_key> markers (empty, holding "
                          "'<', or starting or ending with whitespace)"},
           Case{R"({"anyOf": [{"type": "object"}]})", p,
                "'" + p + "': \"anyOf\" at the top of the parameters cannot be forced in the glm tool-call markup "
                          "(its arguments are the \"required\" properties)"},
           Case{R"({"required": ["a"], "properties": {"a": {"type": "integer", "format": "x"}}})", p + ".properties.a",
                "'" + p + ".properties.a': unsupported JSON Schema keyword 'format' at the schema root"},
       }) {
    INFO(c.parameters);
    auto plan = plan_for(tok, {tool("f", c.parameters)}, "f");
    REQUIRE_FALSE(plan);
    CHECK(plan.error().param == c.param);
    CHECK(plan.error().message == c.message);
  }
}

TEST_CASE("The raw-string grammar of a GLM value is the documented automaton", "[tokenizer][tools][glm]") {
  const std::string ebnf = glm_raw_string_ebnf({"</a>"}, "");
  auto g = grammar::compile_ebnf(ebnf);
  INFO(ebnf);
  REQUIRE(g);
  auto index = grammar::build_token_index(glm_tokenizer(false));
  REQUIRE(index);
  auto accepts = [&](const std::string& text) {
    grammar::Matcher m(*g, *index);
    return m.allows_bytes(text) && [&] {
      REQUIRE(m.accept_bytes(text));
      return m.accepting();
    }();
  };
  CHECK(accepts(""));
  CHECK(accepts("abc"));
  CHECK(accepts("</a"));
  CHECK(accepts("<</a<"));
  CHECK_FALSE(accepts("x</a>"));
  CHECK_FALSE(accepts("<</a>"));
  CHECK_FALSE(accepts("42"));
  CHECK(accepts("42a"));
  CHECK_FALSE(accepts("\xEF\xBB\xBF" "1"));
  CHECK(accepts("\xC3\xA9t\xC3\xA9"));
}

}  // namespace waste

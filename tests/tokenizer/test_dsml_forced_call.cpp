// Forced tool calls in DeepSeek-V4.1's DSML markup (compute/prompt/dsml_call_plan.*) through
// configs/chat/deepseek-v4.1.json, driven token by token through ConstraintState with a byte
// tokenizer (every choice checked against the mask before it is taken): the exact bytes of a named
// call with the DSML markers as special tokens and as plain text (the same bytes dsml_invoke()
// renders for those arguments), what the mask allows inside a raw string="true" value (never a
// close marker, which may not even be spelled in bytes), string="false" values under the
// property's schema, "required" choosing among three tools, every forced call read back by the
// DSML parser (whole and streamed) into one call with schema-valid arguments, and the exact
// refusals (an unknown tool named, what the markup cannot carry).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/prompt/chat_format.hpp"
#include "compute/prompt/constraint_builder.hpp"
#include "compute/prompt/dsml.hpp"
#include "compute/prompt/dsml_call_plan.hpp"
#include "compute/prompt/output_constraint.hpp"
#include "compute/prompt/tool_call_parser.hpp"
#include "tests/tokenizer/test_support.hpp"

namespace waste {
namespace {

using nlohmann::json;

const ChatFormat& dsml_format() {
  static const ChatFormat format = [] {
    auto loaded = ChatFormat::load(std::filesystem::path(WASTE_SOURCE_DIR) / "configs" / "chat" / "deepseek-v4.1.json");
    REQUIRE(loaded.has_value());
    return std::move(*loaded);
  }();
  return format;
}

constexpr int kEos = 400, kUser = 401, kParamClose = 415;

// Bytes as tokens (ranks 0..255); with `specials`, DSML's markers as special ids 410..415.
Tokenizer dsml_tokenizer(bool specials) {
  std::vector<Special> list = {{kEos, "<｜end▁of▁sentence｜>"}, {kUser, "<｜User｜>"}};
  if (specials) {
    list.insert(list.end(), {{410, "<｜DSML｜ calls>"}, {411, "</｜DSML｜ calls>"}, {412, "<｜DSML｜ invoke"},
                             {413, "</｜DSML｜ invoke>"}, {414, "<｜DSML｜ parameter name=\""},
                             {kParamClose, "</｜DSML｜ parameter>"}});
  }
  auto tok = Tokenizer::from_ranks(test::rank_file({}), std::move(list));
  REQUIRE(tok.has_value());
  tok->set_eos(kEos);
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
  auto index = grammar::build_token_index(tok, std::vector<int>{kUser});
  REQUIRE(index);
  OutputSpec spec;
  spec.tools = tools;
  spec.tool_choice = named.empty() ? ToolChoice::required : ToolChoice::named;
  spec.tool_choice_name = named;
  return make_constraint_plan(spec, dsml_format(), tok, *index, {});
}

// One sequence through a plan: forced tokens taken as they come, chosen bytes checked against
// the mask before they are accepted; `text` is everything emitted.
struct Driver {
  const Tokenizer& tok;
  ConstraintState state;
  std::string text;

  Driver(const Tokenizer& t, std::shared_ptr<const ConstraintPlan> plan) : tok(t), state(std::move(plan)) {}

  bool allowed(int token) {
    if (state.done() || state.forced() >= 0) return false;
    std::vector<float> logits(std::size_t(tok.vocab()), 0.0f);
    state.mask(logits);
    return std::isfinite(logits[std::size_t(token)]);
  }
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
  // A value's end: the close token (specials; taken as forced where nothing else may follow) or its text.
  void end_value(bool specials) {
    if (specials) {
      if (state.forced() == kParamClose) return take(kParamClose);
      REQUIRE(allowed(kParamClose));
      take(kParamClose);
    } else {
      bytes("</｜DSML｜ parameter>");
    }
  }
};

// The parser's reading of `text`: exactly one call and no content.
ChatToolCall only_call(const std::string& text) {
  const ParsedToolCalls parsed = parse_tool_calls(*dsml_format().tools, text, "call_");
  INFO(text);
  CHECK(parsed.content.empty());
  REQUIRE(parsed.calls.size() == 1);
  // Streamed a byte at a time: the same call.
  ToolCallParser parser(*dsml_format().tools, "call_");
  std::vector<ToolCallEvent> events;
  for (const char c : text) {
    for (ToolCallEvent& e : parser.push(std::string_view(&c, 1))) events.push_back(std::move(e));
  }
  for (ToolCallEvent& e : parser.finish()) events.push_back(std::move(e));
  std::string name, arguments;
  for (const ToolCallEvent& e : events) {
    CHECK(e.kind != ToolCallEvent::Kind::content);
    if (e.kind == ToolCallEvent::Kind::call_start) name += e.name;
    if (e.kind == ToolCallEvent::Kind::arguments) arguments += e.text;
  }
  CHECK(name == parsed.calls[0].name);
  CHECK(arguments == parsed.calls[0].arguments);
  return parsed.calls[0];
}

// The calls block around one invoke, as the DSML render writes an assistant turn's calls.
std::string block(const std::string& name, const std::string& arguments) {
  const ChatToolMarkup& markup = *dsml_format().tools;
  return markup.section.prefix + "\n" + dsml_invoke(markup, ChatToolCall{"x", name, arguments}) + "\n" +
         markup.section.suffix;
}

const std::string kWeather = R"({"type": "object", "required": ["city", "days", "unit", "opts"], "properties": {
  "city": {"type": "string", "description": "a city"}, "days": {"type": "integer", "minimum": 1, "maximum": 16},
  "unit": {"enum": ["celsius", "fahrenheit"]}, "opts": {"type": "object", "required": ["hourly"],
  "properties": {"hourly": {"type": "boolean"}}, "additionalProperties": false},
  "lang": {"type": "string"}}})";

const std::string kHead = "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"";
const std::string kTail = "\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
std::string param(const std::string& key, bool raw) {
  return "<｜DSML｜ parameter name=\"" + key + "\" string=\"" + (raw ? "true" : "false") + "\">";
}
const std::string kClose = "</｜DSML｜ parameter>";

}  // namespace

TEST_CASE("A named DSML call writes the invoke dsml_invoke renders and parses to schema-valid arguments",
          "[tokenizer][tools][dsml]") {
  for (const bool specials : {true, false}) {
    INFO("specials " << specials);
    const Tokenizer tok = dsml_tokenizer(specials);
    auto plan = plan_for(tok, {tool("ping", "{}"), tool("get_weather", kWeather)}, "get_weather");
    INFO((plan ? std::string() : plan.error().message));
    REQUIRE(plan);
    Driver d(tok, *plan);
    d.forced();
    CHECK(d.text == kHead + "get_weather\">\n" + param("city", true));
    // A raw string="true" value: any text, the close only as the marker.
    if (specials) CHECK(d.allowed(kParamClose));  // the empty string
    CHECK(d.allowed(' '));
    CHECK(d.allowed('{'));
    CHECK(d.allowed('"'));
    if (specials) CHECK_FALSE(d.allowed(413));  // another marker's token: never inside a value
    d.bytes("New York");
    d.end_value(specials);
    d.forced();
    CHECK(d.text.ends_with(kClose + "\n" + param("days", false)));
    if (specials) CHECK_FALSE(d.allowed(kParamClose));  // no integer yet
    CHECK_FALSE(d.allowed('x'));
    CHECK_FALSE(d.allowed('"'));
    d.bytes("1");
    if (specials) CHECK(d.allowed(kParamClose));  // "1" is complete, "16" would be too
    CHECK(d.allowed('6'));
    CHECK_FALSE(d.allowed('7'));
    d.bytes("6");
    if (specials) {
      CHECK(d.state.forced() == kParamClose);  // nothing may follow 16: the close is forced
    } else {
      CHECK_FALSE(d.allowed('0'));
      d.end_value(false);
    }
    d.forced();
    CHECK(d.text.ends_with(param("unit", true)));
    CHECK_FALSE(d.allowed('x'));
    d.bytes("fahrenheit");
    if (!specials) d.end_value(false);
    d.forced();
    CHECK(d.text.ends_with(param("opts", false)));
    CHECK_FALSE(d.allowed('<'));  // an object first
    CHECK_FALSE(d.allowed(' '));  // the grammar's JSON has no whitespace
    d.bytes(R"({"hourly":true})");
    if (!specials) d.end_value(false);
    d.forced();
    CHECK(d.state.done());
    const std::string arguments = R"({"city": "New York", "days": 16, "unit": "fahrenheit", "opts": {"hourly": true}})";
    const std::string expected = kHead + "get_weather\">\n" + param("city", true) + "New York" + kClose + "\n" +
                                 param("days", false) + "16" + kClose + "\n" + param("unit", true) + "fahrenheit" +
                                 kClose + "\n" + param("opts", false) + "{\"hourly\":true}" + kClose + kTail;
    CHECK(d.text == expected);
    // What dsml_invoke renders for these arguments, but for the space it puts after ':'.
    std::string rendered = block("get_weather", arguments);
    rendered.replace(rendered.find("\"hourly\": true"), 14, "\"hourly\":true");
    CHECK(d.text == rendered);
    const ChatToolCall call = only_call(d.text);
    CHECK(call.name == "get_weather");
    CHECK(call.arguments == R"({"city":"New York","days":16,"unit":"fahrenheit","opts":{"hourly":true}})");
  }
}

TEST_CASE("A raw DSML string value holds any text but neither close marker", "[tokenizer][tools][dsml]") {
  const std::vector<ToolDef> tools = {tool("note", R"({"type": "object", "required": ["text"],
                                                       "properties": {"text": {"type": "string"}}})")};
  for (const bool specials : {true, false}) {
    INFO("specials " << specials);
    const Tokenizer tok = dsml_tokenizer(specials);
    auto fresh = [&] {
      auto plan = plan_for(tok, tools, "note");
      REQUIRE(plan);
      auto d = std::make_unique<Driver>(tok, *plan);
      d->forced();
      return d;
    };
    // Texts another markup would misread are plain strings here (string="true" says so).
    for (const std::string text : {"12", "true", "null", " lead", "{\"a\": 1}", "a < b", "</｜DSML｜ paramete",
                                   "</｜DSML｜ invok", "<｜DSML｜ parameter name=\"x\"", "é｜ü", "line\nbreak"}) {
      INFO(text);
      auto d = fresh();
      d->bytes(text);
      d->end_value(specials);
      d->forced();
      REQUIRE(d->state.done());
      const ChatToolCall call = only_call(d->text);
      CHECK(json::parse(call.arguments) == json{{"text", text}});
    }
    // The markers cannot be spelled in bytes inside the value: the last byte is refused (as plain
    // text, </｜DSML｜ parameter> spelled out is the value's end instead).
    for (const std::string marker : {kClose, std::string("</｜DSML｜ invoke>")}) {
      INFO(marker);
      if (!specials && marker == kClose) {
        auto d = fresh();
        d->bytes("a" + marker);
        CHECK(d->state.forced() >= 0);  // the value ended: the invoke's close is forced
        d->forced();
        CHECK(d->state.done());
        CHECK(json::parse(only_call(d->text).arguments) == json{{"text", "a"}});
        continue;
      }
      auto d = fresh();
      d->bytes("a" + marker.substr(0, marker.size() - 1));
      CHECK_FALSE(d->allowed('>'));
      d->bytes("<" + marker.substr(0, marker.size() - 1) + "!");  // a restarted, broken marker is text
      d->end_value(specials);
      d->forced();
      CHECK(d->state.done());
    }
  }
  // A stop id sampled where the value is complete ends it with the close token, not the call.
  const Tokenizer tok = dsml_tokenizer(true);
  auto plan = plan_for(tok, tools, "note");
  REQUIRE(plan);
  Driver d(tok, *plan);
  d.forced();
  d.bytes("ok");
  CHECK_FALSE(d.state.accept_stop());
  CHECK(d.state.forced() == kParamClose);
  d.forced();
  CHECK(d.state.done());
  CHECK(d.text == kHead + "note\">\n" + param("text", true) + "ok" + kClose + kTail);
}

TEST_CASE("DSML tool_choice required: a grammar picks the name among three tools, its arguments follow",
          "[tokenizer][tools][dsml]") {
  const std::vector<ToolDef> tools = {
      tool("get", R"({"type": "object", "required": ["q"], "properties": {"q": {"type": "string"}}})"),
      tool("ping", R"({"type": "object", "properties": {"x": {"type": "string"}}})"),
      tool("get_time", R"({"type": "object", "required": ["utc", "zone"], "properties": {"utc": {"type": "boolean"},
                         "zone": {"type": "integer", "minimum": -12, "maximum": 14}}})")};
  for (const bool specials : {true, false}) {
    INFO("specials " << specials);
    const Tokenizer tok = dsml_tokenizer(specials);
    const std::string end = specials ? "" : kClose;
    struct Case {
      std::string name;
      std::vector<std::string> values;
      std::string expected, arguments;
    };
    const std::vector<Case> cases = {
        {"get_time", {"false", "-12"},
         "get_time\">\n" + param("utc", false) + "false" + kClose + "\n" + param("zone", false) + "-12" + kClose,
         R"({"utc":false,"zone":-12})"},
        {"get", {"a\"b"}, "get\">\n" + param("q", true) + "a\"b" + kClose, R"({"q":"a\"b"})"},
        {"ping", {}, "ping\">\n", "{}"},
    };
    for (const Case& c : cases) {
      INFO(c.name);
      auto plan = plan_for(tok, tools, "");
      INFO((plan ? std::string() : plan.error().message));
      REQUIRE(plan);
      Driver d(tok, *plan);
      d.forced();
      CHECK(d.text == kHead);
      CHECK_FALSE(d.allowed('x'));
      CHECK_FALSE(d.allowed('"'));
      d.bytes(c.name);
      if (c.name == "get") {
        CHECK(d.allowed('_'));  // "get" begins "get_time": the quote decides
      }
      d.bytes("\"");
      d.forced();
      for (const std::string& v : c.values) {
        d.bytes(v);
        if (!(specials && d.state.forced() == kParamClose)) d.end_value(specials);
        d.forced();
      }
      CHECK(d.state.done());
      CHECK(d.text == kHead + c.expected + kTail);
      CHECK(d.text == block(c.name, c.arguments));  // as the render writes the call back
      const ChatToolCall call = only_call(d.text);
      CHECK(call.name == c.name);
      CHECK(call.arguments == c.arguments);
    }
  }
}

TEST_CASE("DSML values that raw text cannot carry are JSON under their schema, string=\"false\"",
          "[tokenizer][tools][dsml]") {
  const Tokenizer tok = dsml_tokenizer(true);
  auto plan = plan_for(tok, {tool("f", R"({"type": "object", "required": ["code", "maybe", "mixed"], "properties": {
      "code": {"type": "string", "maxLength": 3}, "maybe": {"type": ["string", "null"]},
      "mixed": {"enum": ["a", 1]}}})")},
                       "f");
  INFO((plan ? std::string() : plan.error().message));
  REQUIRE(plan);
  Driver d(tok, *plan);
  d.forced();
  CHECK(d.text.ends_with(param("code", false)));
  CHECK_FALSE(d.allowed('a'));  // a JSON string: the quote first
  d.bytes("\"abc");
  CHECK_FALSE(d.allowed('d'));  // maxLength 3
  d.bytes("\"");
  d.end_value(true);
  d.forced();
  CHECK(d.text.ends_with(param("maybe", false)));
  d.bytes("null");
  d.end_value(true);
  d.forced();
  CHECK(d.text.ends_with(param("mixed", false)));
  CHECK_FALSE(d.allowed('2'));
  d.bytes("1");
  d.forced();
  CHECK(d.state.done());
  const ChatToolCall call = only_call(d.text);
  CHECK(call.arguments == R"({"code":"abc","maybe":null,"mixed":1})");
}

TEST_CASE("What a DSML call cannot force faithfully is refused naming the field", "[tokenizer][tools][dsml]") {
  const Tokenizer tok = dsml_tokenizer(true);
  auto unknown = plan_for(tok, {tool("get_weather", kWeather)}, "nope");
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().param == "tool_choice");
  CHECK(unknown.error().message == "'tool_choice': no tool is named \"nope\"");
  auto none = plan_for(tok, {}, "");
  REQUIRE_FALSE(none);
  CHECK(none.error().message == "'tool_choice': \"required\" needs at least one tool");

  struct Case {
    std::string parameters, param, message;
  };
  const std::string p = "tools[0].function.parameters";
  for (const Case& c : {
           Case{R"({"required": ["a"], "properties": {"a": {"const": "x</｜DSML｜ parameter>"}}})", p + ".properties.a",
                "'" + p + ".properties.a': the string \"x</｜DSML｜ parameter>\" holds </｜DSML｜ parameter>, which ends "
                          "a value in the DSML tool-call markup"},
           Case{R"({"required": ["a"], "properties": {"a": {"enum": ["y", "</｜DSML｜ invoke>"]}}})", p + ".properties.a",
                "'" + p + ".properties.a': the string \"</｜DSML｜ invoke>\" holds </｜DSML｜ invoke>, which ends a "
                          "value in the DSML tool-call markup"},
           Case{R"({"required": ["a\"b"]})", p + ".required",
                "'" + p + ".required': the key \"a\\\"b\" cannot be written in a DSML parameter tag (empty, or "
                          "holding '\"' or '<')"},
           Case{R"({"required": [""]})", p + ".required",
                "'" + p + ".required': the key \"\" cannot be written in a DSML parameter tag (empty, or holding "
                          "'\"' or '<')"},
           Case{R"({"oneOf": [{"type": "object"}]})", p,
                "'" + p + "': \"oneOf\" at the top of the parameters cannot be forced in the DSML tool-call markup "
                          "(its arguments are the \"required\" properties)"},
           Case{R"({"required": "a"})", p + ".required", "'" + p + ".required': must be an array of property names"},
           Case{R"({"required": ["a"], "properties": {"a": 3}})", p + ".properties.a",
                "'" + p + ".properties.a': must be a JSON Schema object"},
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

TEST_CASE("The raw-text grammar of a DSML value is the documented automaton", "[tokenizer][tools][dsml]") {
  const std::string ebnf = dsml_raw_text_ebnf({"</｜a>", "<｜b"}, "");
  auto g = grammar::compile_ebnf(ebnf);
  INFO(ebnf);
  REQUIRE(g);
  auto index = grammar::build_token_index(dsml_tokenizer(false));
  REQUIRE(index);
  auto accepts = [&](const std::string& text) {
    grammar::Matcher m(*g, *index);
    if (!m.allows_bytes(text)) return false;
    REQUIRE(m.accept_bytes(text));
    return m.accepting();
  };
  CHECK(accepts(""));
  CHECK(accepts("abc"));
  CHECK(accepts("</｜a"));
  CHECK(accepts("<</｜a<"));
  CHECK(accepts("｜a>"));
  CHECK(accepts("</|a>"));  // ASCII '|' is not '｜'
  CHECK(accepts("<｜"));
  CHECK(accepts("42 true \n"));
  CHECK_FALSE(accepts("x</｜a>"));
  CHECK_FALSE(accepts("<</｜a>"));
  CHECK_FALSE(accepts("<｜b"));
  CHECK_FALSE(accepts("</<｜b"));
  const std::string ended = dsml_raw_text_ebnf({"</｜a>"}, "</｜a>");
  auto h = grammar::compile_ebnf(ended);
  REQUIRE(h);
  grammar::Matcher m(*h, *index);
  REQUIRE(m.accept_bytes("x</｜a"));
  CHECK_FALSE(m.accepting());
  REQUIRE(m.accept_bytes(">"));
  CHECK(m.finished());
}

}  // namespace waste

// Constrained answers through the scheduler on the tiny random-weight container: a json_schema
// answer, a "required" call choosing between two tools, and a named call, decoded together with
// a free request, give exactly the tokens each gets alone (the mask is per sequence), and each
// answer parses: the JSON matches its schema's types and bounds, the calls carry their tool's
// arguments (chatml's JSON form, GLM's and DSML's markups). Also the 400s make_constraint gives
// for a schema the grammar engine refuses.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/serve/openai_request.hpp"
#include "cli/serve/scheduler.hpp"
#include "cli/serve/structured_output.hpp"
#include "compute/prompt/tool_call_parser.hpp"
#include "tests/cli/cli_test_support.hpp"

namespace waste::serve {
namespace {

using nlohmann::json;

std::unique_ptr<Engine> open_engine(int ctx_tokens = 1024) {
  EngineOptions o;
  o.model = test::tokenizer_container();
  o.threads = 2;
  o.ctx_tokens = ctx_tokens;
  o.lookahead = 0;
  auto engine = Engine::open(o);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return std::move(*engine);
}

ChatFormat k3() {
  auto f = ChatFormat::load(std::filesystem::path(WASTE_SOURCE_DIR) / "configs/chat/kimi-k3.json");
  REQUIRE(f);
  return *f;
}

ParsedRequest chat(const std::string& body) {
  auto r = parse_request(Endpoint::chat, body);
  INFO((r ? std::string() : r.error().message));
  REQUIRE(r);
  return std::move(*r);
}

const std::string kPerson = R"({"type": "object", "additionalProperties": false, "required": ["age", "name", "ok"],
  "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer", "minimum": 0, "maximum": 99},
                 "ok": {"type": "boolean"}}})";
const std::string kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "additionalProperties": false,
    "required": ["city"], "properties": {"city": {"type": "string", "maxLength": 5}}}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "additionalProperties": false,
    "required": ["zone"], "properties": {"zone": {"type": "integer", "minimum": -12, "maximum": 14}}}}}])";

struct Run {
  std::vector<int> tokens;
  std::string text;
  Finish finish = Finish::none;
};

Run drain(RequestStream& stream) {
  Run run;
  for (bool finished = false; !finished;) {
    std::vector<Delta> deltas;
    finished = stream.take(deltas, std::chrono::milliseconds(200));
    for (const Delta& d : deltas) {
      run.text += d.text;
      if (d.logprob) run.tokens.push_back(d.logprob->token);
    }
  }
  run.finish = stream.finish_reason();
  return run;
}

void check_person(const std::string& text) {
  INFO(text);
  const json v = json::parse(text, nullptr, false);
  REQUIRE(v.is_object());
  REQUIRE(v.size() == 3);
  REQUIRE(v["name"].is_string());
  CHECK(v["name"].get<std::string>().size() <= 6 * 4);  // at most 6 characters of up to 4 bytes
  REQUIRE(v["age"].is_number_integer());
  CHECK(v["age"].get<int>() >= 0);
  CHECK(v["age"].get<int>() <= 99);
  CHECK(v["ok"].is_boolean());
}

void check_call(const ChatToolCall& call) {
  INFO(call.id << " " << call.arguments);
  const json args = json::parse(call.arguments, nullptr, false);
  REQUIRE(args.is_object());
  REQUIRE(args.size() == 1);
  CHECK(call.id == "functions." + call.name + ":0");
  if (call.name == "get_weather") {
    CHECK(args["city"].is_string());
  } else {
    REQUIRE(call.name == "get_time");
    REQUIRE(args["zone"].is_number_integer());
    CHECK(args["zone"].get<int>() >= -12);
    CHECK(args["zone"].get<int>() <= 14);
  }
}

}  // namespace

TEST_CASE("Constrained answers batched get the bits they get alone, and parse", "[serve][scheduler][structured]") {
  auto engine = open_engine();
  auto tokenizer = Tokenizer::load(test::tokenizer_container());
  REQUIRE(tokenizer);
  const ChatFormat format = k3();
  const ChatStop stop = chat_stop(*tokenizer, format);
  auto index = grammar::build_token_index(*tokenizer, stop.ids);
  INFO((index ? std::string() : index.error().message));
  REQUIRE(index);

  const std::string messages = R"("messages": [{"role": "user", "content": "Go."}])";
  const std::vector<std::string> bodies = {
      R"({"model": "m", )" + messages + R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true, "schema": )" + kPerson + "}}}",
      R"({"model": "m", )" + messages + R"(, "tools": )" + kTools + R"(, "tool_choice": "required"})",
      R"({"model": "m", )" + messages + R"(, "tools": )" + kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}}})",
      R"({"model": "m", )" + messages + "}",  // free
  };
  std::vector<GenerationJob> jobs;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    const ParsedRequest r = chat(bodies[i]);
    auto plan = make_constraint(r, format, *tokenizer, *index);
    INFO((plan ? std::string() : plan.error().message));
    REQUIRE(plan);
    GenerationJob job;
    job.prompt = build_chat_prompt(*tokenizer, format, r.messages, true, r.tools_json);
    job.constraint = *plan;
    job.sampling.temperature = 1.0f;
    job.sampling.seed = 40 + i;
    job.max_tokens = i == 3 ? 30 : 300;
    job.stop_ids = stop.ids;
    job.stop_texts = {stop.text};
    job.top_logprobs = 0;
    jobs.push_back(std::move(job));
  }
  CHECK(jobs[3].constraint == nullptr);

  std::vector<Run> alone;
  {
    Scheduler scheduler(*engine, *tokenizer, {1, 8, 64});
    for (const GenerationJob& job : jobs) {
      auto s = scheduler.submit(job);
      REQUIRE(s);
      alone.push_back(drain(**s));
    }
  }
  Scheduler scheduler(*engine, *tokenizer, {4, 8, 64});
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const GenerationJob& job : jobs) {
    auto s = scheduler.submit(job);
    REQUIRE(s);
    streams.push_back(*s);
  }
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    INFO("request " << i);
    const Run together = drain(*streams[i]);
    CHECK(together.tokens == alone[i].tokens);
    CHECK(together.text == alone[i].text);
  }

  CHECK(alone[0].finish == Finish::stop);
  check_person(alone[0].text);
  for (std::size_t i : {std::size_t(1), std::size_t(2)}) {
    INFO(alone[i].text);
    CHECK(alone[i].finish == Finish::stop);
    const ParsedToolCalls calls = parse_tool_calls(*format.tools, alone[i].text, "unused_");
    CHECK(calls.content.empty());
    REQUIRE(calls.calls.size() == 1);
    check_call(calls.calls[0]);
    if (i == 2) CHECK(calls.calls[0].name == "get_time");
  }
}

TEST_CASE("chatml's JSON form: forced calls (required between two tools, named) parse into their arguments",
          "[serve][scheduler][structured]") {
  auto engine = open_engine();
  auto tokenizer = Tokenizer::load(test::tokenizer_container());
  REQUIRE(tokenizer);
  auto format = ChatFormat::load(std::filesystem::path(WASTE_SOURCE_DIR) / "configs/chat/chatml.json");
  REQUIRE(format);
  const ChatStop stop = chat_stop(*tokenizer, *format);
  auto index = grammar::build_token_index(*tokenizer, stop.ids);
  REQUIRE(index);
  Scheduler scheduler(*engine, *tokenizer, {2, 8, 64});
  const std::string messages = R"("messages": [{"role": "user", "content": "Go."}])";
  for (const std::string choice : {std::string(R"("required")"),
                                   std::string(R"({"type": "function", "function": {"name": "get_weather"}})")}) {
    INFO(choice);
    const ParsedRequest r = chat(R"({"model": "m", )" + messages + R"(, "tools": )" + kTools +
                                 R"(, "tool_choice": )" + choice + "}");
    auto plan = make_constraint(r, *format, *tokenizer, *index);
    REQUIRE(plan);
    GenerationJob job;
    job.prompt = build_chat_prompt(*tokenizer, *format, r.messages, true, r.tools_json);
    job.constraint = *plan;
    job.sampling.temperature = 1.0f;
    job.sampling.seed = 7;
    job.max_tokens = 300;
    job.stop_ids = stop.ids;
    job.stop_texts = {stop.text};
    auto s = scheduler.submit(job);
    REQUIRE(s);
    const Run run = drain(**s);
    INFO(run.text);
    CHECK(run.finish == Finish::stop);
    CHECK(run.text.rfind("<tool_call>\n{\"name\": \"", 0) == 0);
    const ParsedToolCalls calls = parse_tool_calls(*format->tools, run.text, "call_x_");
    CHECK(calls.content.empty());
    REQUIRE(calls.calls.size() == 1);
    CHECK(calls.calls[0].id == "call_x_0");
    if (r.tool_choice == ToolChoice::named) CHECK(calls.calls[0].name == "get_weather");
    ChatToolCall as_kimi = calls.calls[0];
    as_kimi.id = "functions." + as_kimi.name + ":0";  // check_call's id rule is Kimi's
    check_call(as_kimi);
  }
}

TEST_CASE("GLM's markup: forced calls (required among three tools, named) parse into schema-valid arguments",
          "[serve][scheduler][structured][glm]") {
  auto engine = open_engine();
  auto tokenizer = Tokenizer::load(test::tokenizer_container());
  REQUIRE(tokenizer);
  auto format = ChatFormat::load(std::filesystem::path(WASTE_SOURCE_DIR) / "configs/chat/glm-5.json");
  REQUIRE(format);
  const ChatStop stop = chat_stop(*tokenizer, *format);
  auto index = grammar::build_token_index(*tokenizer, stop.ids);
  REQUIRE(index);
  const std::string tools = R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "required": ["unit"],
      "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "required": ["zone", "utc"],
      "properties": {"zone": {"type": "integer", "minimum": -12, "maximum": 14}, "utc": {"type": "boolean"}}}}},
    {"type": "function", "function": {"name": "ping"}}])";
  Scheduler scheduler(*engine, *tokenizer, {2, 8, 64});
  const std::string messages = R"("messages": [{"role": "user", "content": "Go."}])";
  int seed = 0;
  for (const std::string choice : {std::string(R"("required")"), std::string(R"("required")"),
                                   std::string(R"({"type": "function", "function": {"name": "get_time"}})")}) {
    INFO(choice << " seed " << seed);
    const ParsedRequest r = chat(R"({"model": "m", )" + messages + R"(, "tools": )" + tools + R"(, "tool_choice": )" +
                                 choice + "}");
    auto plan = make_constraint(r, *format, *tokenizer, *index);
    INFO((plan ? std::string() : plan.error().message));
    REQUIRE(plan);
    GenerationJob job;
    job.prompt = build_chat_prompt(*tokenizer, *format, r.messages, true, r.tools_json);
    job.constraint = *plan;
    job.sampling.temperature = 1.0f;
    job.sampling.seed = std::uint64_t(20 + seed++);
    job.max_tokens = 300;
    job.stop_ids = stop.ids;
    job.stop_texts = {stop.text};
    auto s = scheduler.submit(job);
    REQUIRE(s);
    const Run run = drain(**s);
    INFO(run.text);
    CHECK(run.finish == Finish::stop);
    CHECK(run.text.starts_with("<tool_call>"));
    CHECK(run.text.ends_with("</tool_call>"));
    const ParsedToolCalls calls = parse_tool_calls(*format->tools, run.text, "call_x_");
    CHECK(calls.content.empty());
    REQUIRE(calls.calls.size() == 1);
    const std::string& name = calls.calls[0].name;
    const json args = json::parse(calls.calls[0].arguments, nullptr, false);
    REQUIRE(args.is_object());
    if (r.tool_choice == ToolChoice::named) CHECK(name == "get_time");
    if (name == "get_weather") {
      CHECK(args.size() == 1);
      CHECK((args["unit"] == "celsius" || args["unit"] == "fahrenheit"));
    } else if (name == "get_time") {
      CHECK(args.size() == 2);
      REQUIRE(args["zone"].is_number_integer());
      CHECK(args["zone"].get<int>() >= -12);
      CHECK(args["zone"].get<int>() <= 14);
      CHECK(args["utc"].is_boolean());
    } else {
      CHECK(name == "ping");
      CHECK(args.empty());
    }
  }
  // What the markup cannot carry faithfully: a 400 naming the property.
  const ParsedRequest bad = chat(R"({"model": "m", )" + messages + R"(, "tool_choice": "required", "tools": [{"type":
      "function", "function": {"name": "f", "parameters": {"type": "object", "required": ["s"], "properties":
      {"s": {"type": "string", "pattern": "^a+$"}}}}}]})");
  auto refused = make_constraint(bad, *format, *tokenizer, *index);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().status == 400);
  CHECK(refused.error().param == "tools[0].function.parameters.properties.s");
  CHECK(refused.error().message == "'tools[0].function.parameters.properties.s': \"pattern\" on a string cannot be "
                                   "enforced in the glm tool-call markup (strings are written unquoted)");
}

TEST_CASE("DSML markup: forced calls (required among three tools, named) parse into schema-valid arguments",
          "[serve][scheduler][structured][dsml]") {
  auto engine = open_engine(2048);  // DSML's declaration is long: the prompt is ~1200 tokens
  auto tokenizer = Tokenizer::load(test::tokenizer_container());
  REQUIRE(tokenizer);
  auto format = ChatFormat::load(std::filesystem::path(WASTE_SOURCE_DIR) / "configs/chat/deepseek-v4.1.json");
  REQUIRE(format);
  const ChatStop stop = chat_stop(*tokenizer, *format);
  auto index = grammar::build_token_index(*tokenizer, stop.ids);
  REQUIRE(index);
  // "code": a string with keywords raw text cannot enforce, so JSON under its schema (string="false").
  const std::string tools = R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "required": ["unit", "code"],
      "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}, "code": {"type": "string", "pattern": "^[ab]{1,3}$"}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "required": ["zone", "utc"],
      "properties": {"zone": {"type": "integer", "minimum": -12, "maximum": 14}, "utc": {"type": "boolean"}}}}},
    {"type": "function", "function": {"name": "ping"}}])";
  Scheduler scheduler(*engine, *tokenizer, {2, 8, 64});
  const std::string messages = R"("messages": [{"role": "user", "content": "Go."}])";
  int seed = 0;
  for (const std::string choice : {std::string(R"("required")"), std::string(R"("required")"),
                                   std::string(R"("required")"), std::string(R"("required")"),
                                   std::string(R"({"type": "function", "function": {"name": "get_weather"}})"),
                                   std::string(R"({"type": "function", "function": {"name": "get_time"}})")}) {
    INFO(choice << " seed " << seed);
    const ParsedRequest r = chat(R"({"model": "m", )" + messages + R"(, "tools": )" + tools + R"(, "tool_choice": )" +
                                 choice + "}");
    auto plan = make_constraint(r, *format, *tokenizer, *index);
    INFO((plan ? std::string() : plan.error().message));
    REQUIRE(plan);
    GenerationJob job;
    job.prompt = build_chat_prompt(*tokenizer, *format, r.messages, true, r.tools_json);
    job.constraint = *plan;
    job.sampling.temperature = 1.0f;
    job.sampling.seed = std::uint64_t(40 + seed++);
    job.max_tokens = 300;
    job.stop_ids = stop.ids;
    job.stop_texts = {stop.text};
    auto s = scheduler.submit(job);
    INFO("prompt tokens " << job.prompt.size() << ": " << (s ? std::string() : s.error().message));
    REQUIRE(s);
    const Run run = drain(**s);
    INFO(run.text);
    CHECK(run.finish == Finish::stop);
    CHECK(run.text.starts_with("\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\""));
    CHECK(run.text.ends_with("\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"));
    const ParsedToolCalls calls = parse_tool_calls(*format->tools, run.text, "call_x_");
    CHECK(calls.content.empty());
    REQUIRE(calls.calls.size() == 1);
    const std::string& name = calls.calls[0].name;
    const json args = json::parse(calls.calls[0].arguments, nullptr, false);
    REQUIRE(args.is_object());
    if (r.tool_choice == ToolChoice::named) CHECK(name == r.tool_choice_name);
    if (name == "get_weather") {
      CHECK(args.size() == 2);
      CHECK((args["unit"] == "celsius" || args["unit"] == "fahrenheit"));
      REQUIRE(args["code"].is_string());
      const std::string code = args["code"];
      CHECK(!code.empty());
      CHECK(code.size() <= 3);
      CHECK(code.find_first_not_of("ab") == std::string::npos);
      CHECK(run.text.find("<｜DSML｜ parameter name=\"code\" string=\"false\">\"" + code + "\"</｜DSML｜ parameter>") !=
            std::string::npos);
    } else if (name == "get_time") {
      CHECK(args.size() == 2);
      REQUIRE(args["zone"].is_number_integer());
      CHECK(args["zone"].get<int>() >= -12);
      CHECK(args["zone"].get<int>() <= 14);
      CHECK(args["utc"].is_boolean());
    } else {
      CHECK(name == "ping");
      CHECK(args.empty());
    }
  }
  // A named tool that is not declared: the request's own 400.
  auto unknown = parse_request(Endpoint::chat, R"({"model": "m", )" + messages + R"(, "tools": )" + tools +
                                                   R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}}})");
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().param == "tool_choice.function.name");
  CHECK(unknown.error().message == "'tool_choice.function.name' \"nope\" is not one of the declared tools");
}

TEST_CASE("A schema the grammar engine refuses is a 400 naming the parameter and the keyword", "[serve][structured]") {
  auto tokenizer = Tokenizer::load(test::tokenizer_container());
  REQUIRE(tokenizer);
  auto index = grammar::build_token_index(*tokenizer);
  REQUIRE(index);
  const ChatFormat format = k3();
  const ParsedRequest r = chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format":
      {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "not": {}}}}})");
  auto plan = make_constraint(r, format, *tokenizer, *index);
  REQUIRE_FALSE(plan);
  CHECK(plan.error().status == 400);
  CHECK(plan.error().param == "response_format.json_schema.schema");
  const auto expected = grammar::compile_json_schema(json::parse(R"({"type": "object", "not": {}})"));
  REQUIRE_FALSE(expected);
  CHECK(plan.error().message == "'response_format.json_schema.schema': " + expected.error().message);
  CHECK(expected.error().message.find("'not'") != std::string::npos);

  const ParsedRequest t = chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "patternProperties": {}}}}]})");
  auto tool_plan = make_constraint(t, format, *tokenizer, *index);
  REQUIRE_FALSE(tool_plan);
  CHECK(tool_plan.error().param == "tools[0].function.parameters");
  CHECK(tool_plan.error().message.rfind("'tools[0].function.parameters': ", 0) == 0);
  CHECK(tool_plan.error().message.find("patternProperties") != std::string::npos);

  // No grammar engine (the index could not be built): refused, never answered unconstrained.
  auto none = make_constraint(r, format, *tokenizer, nullptr);
  REQUIRE_FALSE(none);
  CHECK(none.error().message ==
        "'response_format': constrained output is not available in this server (the grammar engine could not index "
        "the vocabulary)");
}

TEST_CASE("Requests with the same schema share one compiled grammar (and its warm token sets)", "[serve][structured]") {
  auto tokenizer = Tokenizer::load(test::tokenizer_container());
  REQUIRE(tokenizer);
  auto index = grammar::build_token_index(*tokenizer);
  REQUIRE(index);
  const ChatFormat format = k3();
  auto plan_of = [&](const std::string& schema) {
    const ParsedRequest r = chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format":
        {"type": "json_schema", "json_schema": {"name": "x", "schema": )" + schema + "}}}");
    auto plan = make_constraint(r, format, *tokenizer, *index);
    REQUIRE(plan);
    REQUIRE(*plan);
    REQUIRE((*plan)->stages.size() == 1);
    return (*plan)->stages[0].grammar;
  };
  const auto a = plan_of(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})");
  const auto b = plan_of(R"({"required": ["a"], "properties": {"a": {"type": "integer"}}, "type": "object"})");
  const auto c = plan_of(R"({"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]})");
  CHECK(a == b);  // the same schema, keys in another order
  CHECK(a != c);
}

TEST_CASE("Tools on a chat format without tool markup are refused", "[serve][structured]") {
  ChatFormat plain = k3();
  plain.tools.reset();
  const ParsedRequest r = chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}]})");
  auto refused = check_tools_supported(r, plain);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().param == "tools");
  CHECK(refused.error().message ==
        "'tools': this model's chat format has no tool-call markup (a \"tools\" object in chat.json)");
}

}  // namespace waste::serve

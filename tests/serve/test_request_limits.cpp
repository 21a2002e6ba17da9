// What a request's content may cost before it is refused (docs/design/serve.md, Limits): the
// nesting of its JSON and of each schema in it (a 1,000,000-deep array used to overflow the stack
// in a copy, dump() or the schema compiler), and an ambiguous schema (2^40 derivations used to
// stall the engine thread). Each refusal is a 400 naming the limit and the parameter.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "cli/serve/json_body.hpp"
#include "cli/serve/openai_request.hpp"
#include "cli/serve/structured_output.hpp"
#include "tests/cli/cli_test_support.hpp"

namespace waste::serve {
namespace {

using nlohmann::json;

std::string deep_array(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string with_schema(const std::string& schema) {
  return R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
      "json_schema": {"name": "x", "schema": )" + schema + "}}}";
}
std::string with_tool(const std::string& parameters) {
  return R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_choice": "required", "tools": [
      {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
      {"type": "function", "function": {"name": "g", "parameters": )" + parameters + "}}]}";
}

ApiError refused(const std::string& body, int depth = 64) {
  auto r = parse_request(Endpoint::chat, body, depth);
  REQUIRE_FALSE(r);
  CHECK(r.error().status == 400);
  return r.error();
}

// 0: a string; k: {"anyOf": [{"$ref": k-1}, {"$ref": k-1}]} (3 KB at 40 levels).
std::string doubling_defs(int levels) {
  json defs;
  defs["d0"] = {{"type", "string"}};
  for (int k = 1; k <= levels; ++k) {
    const std::string prev = "#/$defs/d" + std::to_string(k - 1);
    defs["d" + std::to_string(k)] = {{"anyOf", {{{"$ref", prev}}, {{"$ref", prev}}}}};
  }
  return json{{"$defs", defs}, {"$ref", "#/$defs/d" + std::to_string(levels)}}.dump();
}

struct Grammar {
  Grammar() {
    auto t = Tokenizer::load(test::tokenizer_container());
    REQUIRE(t);
    tokenizer.emplace(std::move(*t));
    auto i = grammar::build_token_index(*tokenizer);
    REQUIRE(i);
    index = *i;
    auto f = ChatFormat::load(std::filesystem::path(WASTE_SOURCE_DIR) / "configs/chat/kimi-k3.json");
    REQUIRE(f);
    format = *f;
  }
  std::optional<Tokenizer> tokenizer;
  std::shared_ptr<const grammar::TokenIndex> index;
  ChatFormat format;
};

}  // namespace

TEST_CASE("request JSON nested past --max-json-depth is refused while it is parsed, naming where",
          "[serve][request][limits]") {
  ApiError e = refused(with_schema("{\"a\": " + deep_array(1000000) + "}"));
  CHECK(e.param == "response_format.json_schema.schema");
  CHECK(e.message == "response_format.json_schema.schema: nesting deeper than 64 (--max-json-depth)");
  e = refused(with_tool("{\"type\": \"object\", \"properties\": {\"a\": " + deep_array(1000000) + "}}"));
  CHECK(e.param == "tools[1].function.parameters");
  CHECK(e.message == "tools[1].function.parameters: nesting deeper than 64 (--max-json-depth)");
  e = refused(R"({"model": "m", "messages": [{"role": "user", "content": )" + deep_array(1000000) + "}]}");
  CHECK(e.param == "messages[0].content");
  e = refused(deep_array(1000000));
  CHECK(e.param == "[0][0][0]");
  CHECK(e.message == "[0][0][0]: nesting deeper than 64 (--max-json-depth)");
  // Exactly the limit: the body (1), messages (2), the message (3), content (4), arrays inside.
  const auto nested = [](int arrays) {
    return R"({"model": "m", "messages": [{"role": "user", "content": )" + deep_array(std::size_t(arrays)) + "}]}";
  };
  auto at_limit = parse_request(Endpoint::chat, nested(4), 7);
  REQUIRE_FALSE(at_limit);
  CHECK(at_limit.error().message.find("nesting") == std::string::npos);  // refused for its content, not its depth
  CHECK(refused(nested(5), 7).message == "messages[0].content: nesting deeper than 7 (--max-json-depth)");
  // Invalid JSON is still reported as such (the parse stops at the error, not the depth).
  CHECK(refused("[[[[").message.starts_with("request body is not valid JSON: "));
  CHECK(refused("{\"a\": [1, 2,]}").message.starts_with("request body is not valid JSON: "));
  CHECK(nested_deeper_than(json::parse(deep_array(65)), 64));
  CHECK_FALSE(nested_deeper_than(json::parse(deep_array(64)), 64));
}

TEST_CASE("make_constraint: a deep schema, a $ref chain and 2^20 or 2^40 derivations get 400 naming the limit",
          "[serve][structured][limits]") {
  Grammar g;
  // A schema that did not come through the parser (nested 1,000,000 deep): refused before dump().
  ParsedRequest r;
  r.response_format = ResponseFormat::json_schema;
  r.response_schema = json::parse("{\"a\": " + deep_array(1000000) + "}");
  auto deep = make_constraint(r, g.format, *g.tokenizer, g.index);
  REQUIRE_FALSE(deep);
  CHECK(deep.error().status == 400);
  CHECK(deep.error().param == "response_format.json_schema.schema");
  CHECK(deep.error().message == "response_format.json_schema.schema: nesting deeper than 64 (--max-json-depth)");
  ParsedRequest t;
  t.tools.push_back({"f", json::parse(deep_array(1000000))});
  t.tool_choice = ToolChoice::required;
  auto tool = make_constraint(t, g.format, *g.tokenizer, g.index);
  REQUIRE_FALSE(tool);
  CHECK(tool.error().param == "tools[0].function.parameters");
  CHECK(tool.error().message == "tools[0].function.parameters: nesting deeper than 64 (--max-json-depth)");

  // Issue 27's 40 levels: two levels of nesting each (the anyOf entry, the $ref hop).
  auto parsed = parse_request(Endpoint::chat, with_schema(doubling_defs(40)));
  REQUIRE(parsed);
  auto forty = make_constraint(*parsed, g.format, *g.tokenizer, g.index);
  REQUIRE_FALSE(forty);
  CHECK(forty.error().status == 400);
  CHECK(forty.error().param == "response_format.json_schema.schema");
  CHECK(forty.error().message == "'response_format.json_schema.schema': schema nesting deeper than 64 "
                                 "(--max-json-depth) at /$defs/d9/anyOf/0 ($ref hops count as levels)");
  // 20 levels are within the depth: 2^20 derivations meet the expansion limit.
  parsed = parse_request(Endpoint::chat, with_schema(doubling_defs(20)));
  REQUIRE(parsed);
  auto ambiguous = make_constraint(*parsed, g.format, *g.tokenizer, g.index);
  REQUIRE_FALSE(ambiguous);
  CHECK(ambiguous.error().param == "response_format.json_schema.schema");
  CHECK(ambiguous.error().message ==
        "'response_format.json_schema.schema': grammar too ambiguous: a byte in rule 'ref:#/$defs/d17' may be "
        "reached over 65536 ways (the expansion limit)");
  parsed = parse_request(Endpoint::chat, with_tool(doubling_defs(20)));
  REQUIRE(parsed);
  ambiguous = make_constraint(*parsed, g.format, *g.tokenizer, g.index);
  REQUIRE_FALSE(ambiguous);
  CHECK(ambiguous.error().param == "tools[1].function.parameters");

  // $ref hops count as levels of the schema's nesting.
  json defs;
  for (int k = 0; k < 100; ++k) defs["r" + std::to_string(k)] = {{"$ref", "#/$defs/r" + std::to_string(k + 1)}};
  defs["r100"] = {{"type", "integer"}};
  parsed = parse_request(Endpoint::chat, with_schema(json{{"$defs", defs}, {"$ref", "#/$defs/r0"}}.dump()));
  REQUIRE(parsed);
  auto chain = make_constraint(*parsed, g.format, *g.tokenizer, g.index);
  REQUIRE_FALSE(chain);
  CHECK(chain.error().message ==
        "'response_format.json_schema.schema': schema nesting deeper than 64 (--max-json-depth) at /$defs/r63 "
        "($ref hops count as levels)");
  RequestLimits deeper;
  deeper.max_json_depth = 128;
  CHECK(make_constraint(*parsed, g.format, *g.tokenizer, g.index, deeper));
}

}  // namespace waste::serve

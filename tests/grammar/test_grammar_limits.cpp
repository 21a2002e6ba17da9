// What one schema or grammar may cost to compile and to run: nesting (the compiler recurses once
// per level, $ref hops included), ambiguity (derivations one byte's expansion may walk), time,
// and the runtime bounds of one step. Each case is a hazard that crashed or stalled `waste serve`
// before (docs/design/grammar.md, Limits).
#include "compute/sampling/grammar/automaton.hpp"
#include "tests/grammar/grammar_test_support.hpp"

namespace waste::grammar::test {
namespace {

// 0: a string; k: {"anyOf": [{"$ref": k-1}, {"$ref": k-1}]}: 2^levels derivations of one byte.
nlohmann::json doubling_defs(int levels) {
  nlohmann::json defs;
  defs["d0"] = {{"type", "string"}};
  for (int k = 1; k <= levels; ++k) {
    const std::string prev = "#/$defs/d" + std::to_string(k - 1);
    defs["d" + std::to_string(k)] = {{"anyOf", {{{"$ref", prev}}, {{"$ref", prev}}}}};
  }
  return {{"$defs", defs}, {"$ref", "#/$defs/d" + std::to_string(levels)}};
}

}  // namespace

TEST_CASE("limits: $defs each doubling the last (2^n derivations) are refused past 65536", "[grammar]") {
  // 20 levels: 2^20 derivations of the first byte.
  auto g = compile_json_schema(doubling_defs(20));
  REQUIRE_FALSE(g);
  CHECK(g.error().code == Errc::unsupported);
  CHECK(g.error().message ==
        "grammar too ambiguous: a byte in rule 'ref:#/$defs/d17' may be reached over 65536 ways (the expansion limit)");
  // 40 levels (issue 27's 3 KB schema): each level is two of nesting (the anyOf entry, the $ref
  // hop), so the depth limit refuses it first; without that limit the expansion limit does.
  auto forty = compile_json_schema(doubling_defs(40));
  REQUIRE_FALSE(forty);
  CHECK(forty.error().message == "schema nesting deeper than 64 at /$defs/d9/anyOf/0 ($ref hops count as levels)");
  CompileLimits deep;
  deep.max_depth = 1000;
  forty = compile_json_schema(doubling_defs(40), deep);
  REQUIRE_FALSE(forty);
  CHECK(forty.error().message ==
        "grammar too ambiguous: a byte in rule 'ref:#/$defs/d17' may be reached over 65536 ways (the expansion limit)");
  // 15 levels (32768 derivations) are within the limit and match what d0 matches.
  auto ok = compile_json_schema(doubling_defs(15));
  REQUIRE(ok);
  CHECK(full_match(*ok, R"("abc")"));
  CHECK_FALSE(full_match(*ok, "1"));
}

TEST_CASE("limits: expansion de-duplicates as it goes (30 doublings run in linear time)", "[grammar]") {
  // With the compile-time count lifted, only the automaton's own bounds (2^20 stacks walked per
  // step) stand between 2^30 paths and the first byte: walked path by path they would overflow.
  CompileLimits lifted;
  lifted.max_expansion = std::uint64_t(1) << 62;
  lifted.max_depth = 1000;
  auto g = compile_json_schema(doubling_defs(30), lifted);
  REQUIRE(g);
  CHECK(full_match(*g, R"("x")"));
  bool overflow = true;
  const StackSet initial = (*g)->initial(&overflow);
  CHECK_FALSE(overflow);
  CHECK(initial.size() == 1);
}

TEST_CASE("limits: a step past the runtime bounds fails with an error naming them", "[grammar]") {
  // X_k ::= X_k-1 "a" | X_k-1 "b": 2^18 distinct stacks after "s", more than kMaxStacks.
  std::string text = "root ::= \"s\" x18\nx0 ::= \"c\"\n";
  for (int k = 1; k <= 18; ++k) {
    text += "x" + std::to_string(k) + " ::= x" + std::to_string(k - 1) + " \"a\" | x" + std::to_string(k - 1) + " \"b\"\n";
  }
  CHECK(ebnf_error(text) == "grammar line 19, column 1: grammar too ambiguous: a byte in rule 'x17' may be reached "
                            "over 65536 ways (the expansion limit)");
  CompileLimits lifted;
  lifted.max_expansion = std::uint64_t(1) << 62;
  auto g = compile_ebnf(text, lifted);
  REQUIRE(g);
  Matcher m(*g, byte_index());
  auto after = m.accept_bytes("s");
  REQUIRE_FALSE(after);
  CHECK(after.error().message ==
        "grammar: after the text \"s\" the parse went past its bounds (65536 stacks or 1048576 expansion steps per byte)");
}

TEST_CASE("limits: schema nesting, $ref hops included, is refused past max_depth", "[grammar]") {
  nlohmann::json deep = {{"type", "string"}};
  for (int i = 0; i < 64; ++i) deep = {{"type", "array"}, {"items", deep}};  // 65 levels
  auto g = compile_json_schema(deep);
  REQUIRE_FALSE(g);
  CHECK(g.error().message.starts_with("schema nesting deeper than 64 at /items/items/"));
  CompileLimits named;
  named.depth_option = "--max-json-depth";
  named.max_depth = 70;
  CHECK(compile_json_schema(deep, named));
  // A chain of 100000 $refs: each hop is one more level of the compiler's recursion.
  nlohmann::json defs;
  for (int k = 0; k < 100000; ++k) defs["r" + std::to_string(k)] = {{"$ref", "#/$defs/r" + std::to_string(k + 1)}};
  defs["r100000"] = {{"type", "integer"}};
  named.max_depth = 64;
  auto chain = compile_json_schema({{"$defs", defs}, {"$ref", "#/$defs/r0"}}, named);
  REQUIRE_FALSE(chain);
  CHECK(chain.error().message ==
        "schema nesting deeper than 64 (--max-json-depth) at /$defs/r63 ($ref hops count as levels)");
}

TEST_CASE("limits: regex groups and stacked quantifiers are bounded", "[grammar]") {
  const std::string groups = std::string(100000, '(') + "a" + std::string(100000, ')');
  CHECK(schema_error(nlohmann::json{{"type", "string"}, {"pattern", groups}}.dump()).ends_with(
      "groups nested deeper than 64 at offset 64 (see the regex subset in docs/design/grammar.md)"));
  CHECK(schema_error(nlohmann::json{{"type", "string"}, {"pattern", "^a" + std::string(100000, '*') + "$"}}.dump())
            .ends_with("a quantifier after a quantifier (use a group) at offset 3 (see the regex subset in docs/design/grammar.md)"));
  CHECK(full_match(schema(R"({"type":"string","pattern":"^(a{2})*$"})"), R"("aaaa")"));
  CHECK(ebnf_error("root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')') + "\n")
            .find("groups nested deeper than 64") != std::string::npos);
}

TEST_CASE("limits: compilation past its time limit is refused", "[grammar]") {
  CompileLimits none;
  none.max_time = std::chrono::milliseconds(-1);
  auto g = compile_json_schema(nlohmann::json::parse(R"({"type":"object","properties":{"a":{"type":"string"}}})"), none);
  REQUIRE_FALSE(g);
  CHECK(g.error().message == "grammar compilation ran over -1 ms (the time limit)");
}

}  // namespace waste::grammar::test

// The GBNF-like grammar file: what it matches, and parse errors with their line and column.
#include <fstream>
#include <sstream>

#include "tests/grammar/grammar_test_support.hpp"

namespace waste::grammar::test {

TEST_CASE("EBNF: literals, classes, groups, repetition, multi-line rules, comments", "[grammar]") {
  auto g = ebnf(R"G(# arithmetic
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor ("*" factor)*
factor ::= number
         | "(" expr ")"
number ::= "-"? [0-9]+ ("." [0-9]{1,2})?
)G");
  CHECK(full_match(g, "1+2*(3-4.25)"));
  CHECK(full_match(g, "-7"));
  CHECK_FALSE(full_match(g, "1+"));
  CHECK(prefix_ok(g, "1+"));
  CHECK_FALSE(full_match(g, "1.234"));
  CHECK_FALSE(prefix_ok(g, "1+*"));
  auto r = ebnf(R"G(root ::= "a"{2,3} [^a-c\n] . x? y
x ::= "\x41\u00e9\t"
y ::= [α-ω]+)G");
  CHECK(full_match(g, "((1))"));
  CHECK(full_match(r, "aad\xE2\x82\xAC" "A\xC3\xA9\t\xCE\xB1\xCF\x89"));
  CHECK(full_match(r, "aaaz!\xCE\xB2"));
  CHECK_FALSE(full_match(r, "aabz\xCE\xB2"));
  CHECK_FALSE(full_match(r, "aaaaz!\xCE\xB2"));
}

TEST_CASE("EBNF parse errors name the line and column", "[grammar]") {
  CHECK(ebnf_error("root ::= \"a\"\nfoo ::= [a-\n") == "grammar line 2, column 9: unterminated character class");
  CHECK(ebnf_error("root ::= \"a\" bar\n") == "grammar line 1, column 14: undefined rule 'bar'");
  CHECK(ebnf_error("root ::= x\n\nx ::= \"abc\n") == "grammar line 3, column 7: unterminated string literal");
  CHECK(ebnf_error("root ::= (\"a\" | \"b\"\n") == "grammar line 1, column 10: unclosed '('");
  CHECK(ebnf_error("root = \"a\"\n") == "grammar line 1, column 6: expected '::=' after rule name 'root'");
  CHECK(ebnf_error("root ::= \"a\"\nroot ::= \"b\"\n") == "grammar line 2, column 1: rule 'root' is defined twice");
  CHECK(ebnf_error("start ::= \"a\"\n") == "grammar: no rule named 'root'");
  CHECK(ebnf_error("root ::= \"a\" \"\\q\"\n") == "grammar line 1, column 15: unknown escape '\\q'");
  CHECK(ebnf_error("root ::= \"a\"{3,2}\n") == "grammar line 1, column 13: bad '{n,m}' repetition");
  CHECK(ebnf_error("root ::= \"a\" )\n") == "grammar line 1, column 14: unbalanced ')'");
  CHECK(ebnf_error("# only a comment\n") == "grammar line 2, column 1: the grammar is empty (it needs a rule named 'root')");
}

TEST_CASE("EBNF left recursion is refused with the rule's line (hazard: endless expansion)", "[grammar]") {
  CHECK(ebnf_error("root ::= list\nlist ::= list \",\" item | item\nitem ::= [a-z]\n") ==
        "grammar line 2, column 1: rule 'list' is left-recursive (it can reach itself without consuming a byte)");
  CHECK(ebnf_error("root ::= a\na ::= b? a \"x\"\nb ::= \"y\"\n") ==
        "grammar line 2, column 1: rule 'a' is left-recursive (it can reach itself without consuming a byte)");
  // Right recursion is fine.
  CHECK(full_match(ebnf("root ::= item (\",\" root)?\nitem ::= [a-z]\n"), "a,b,c"));
}

TEST_CASE("EBNF: a rule that can match nothing stops the match cleanly", "[grammar]") {
  auto g = ebnf("root ::= \"a\" [^\\x00-\\U0010FFFF]\n");
  Matcher m(g, byte_index());
  REQUIRE_FALSE(m.accept_bytes("a"));
  CHECK(m.accept_bytes("b").error().message == "grammar: the text \"b\" is not allowed here");
}

}  // namespace waste::grammar::test

namespace waste::grammar::test {

TEST_CASE("the example files in configs/grammar compile (and the example grammar matches)", "[grammar]") {
  auto read = [](const char* name) {
    std::ifstream in(std::string(WASTE_SOURCE_DIR) + "/configs/grammar/" + name, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  auto g = ebnf(read("kv_object.gbnf"));
  CHECK(full_match(g, R"({a:1,bc:"x y",d:{e:{}}})"));
  CHECK_FALSE(full_match(g, R"({A:1})"));
  for (const char* s : {"person.json", "tool_call.json", "tree.json"}) {
    INFO(s);
    CHECK(compile_json_schema(nlohmann::json::parse(read(s))).has_value());
  }
}

}  // namespace waste::grammar::test

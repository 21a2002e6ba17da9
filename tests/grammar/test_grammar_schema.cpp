// JSON Schema compilation: what each keyword accepts and rejects, byte for byte, and the exact
// refusal of every keyword we do not enforce (a hazard: a silently ignored keyword would let
// invalid output through).
#include "tests/grammar/grammar_test_support.hpp"

namespace waste::grammar::test {

TEST_CASE("integer minimum/maximum accept exactly the range (exhaustive over -1100..1100)", "[grammar]") {
  const std::vector<std::pair<long, long>> ranges = {{0, 0}, {-5, 5}, {7, 123}, {-1000, -999}, {-17, 1009}, {100, 100}, {9, 10}, {-99, -1}, {1, 1099}};
  for (auto [lo, hi] : ranges) {
    auto g = schema(R"({"type":"integer","minimum":)" + std::to_string(lo) + R"(,"maximum":)" + std::to_string(hi) + "}");
    for (long v = -1100; v <= 1100; ++v) {
      INFO(lo << ".." << hi << " value " << v);
      REQUIRE(full_match(g, std::to_string(v)) == (v >= lo && v <= hi));
    }
    CHECK_FALSE(full_match(g, "-0"));
    CHECK_FALSE(full_match(g, "00"));
  }
}

TEST_CASE("integer bounds: one-sided, exclusive and fractional", "[grammar]") {
  auto ge = schema(R"({"type":"integer","minimum":37})");
  for (long v = -50; v <= 5000; ++v) REQUIRE(full_match(ge, std::to_string(v)) == (v >= 37));
  CHECK(full_match(ge, "123456789012"));
  auto lt = schema(R"({"type":"integer","exclusiveMaximum":-3})");
  for (long v = -500; v <= 500; ++v) REQUIRE(full_match(lt, std::to_string(v)) == (v < -3));
  CHECK(full_match(lt, "-98765432109"));
  auto frac = schema(R"({"type":"integer","minimum":1.5,"exclusiveMaximum":4})");
  for (long v = -5; v <= 10; ++v) REQUIRE(full_match(frac, std::to_string(v)) == (v >= 2 && v <= 3));
  auto any = schema(R"({"type":"integer"})");
  CHECK(full_match(any, "0"));
  CHECK(full_match(any, "-12"));
  CHECK_FALSE(full_match(any, "012"));
  CHECK_FALSE(full_match(any, "1.5"));
  CHECK_FALSE(full_match(any, "-"));
}

TEST_CASE("number, boolean, null", "[grammar]") {
  auto n = schema(R"({"type":"number"})");
  for (const char* ok : {"0", "-0", "1.5", "-12.25e+3", "3E7", "0.0"}) CHECK(full_match(n, ok));
  for (const char* bad : {"01", "1.", ".5", "1e", "+1", "- 1"}) CHECK_FALSE(full_match(n, bad));
  auto b = schema(R"({"type":"boolean"})");
  CHECK(full_match(b, "true"));
  CHECK(full_match(b, "false"));
  CHECK_FALSE(full_match(b, "null"));
  CHECK(full_match(schema(R"({"type":"null"})"), "null"));
}

TEST_CASE("strings: escapes, UTF-8 and minLength/maxLength in characters", "[grammar]") {
  auto s = schema(R"({"type":"string"})");
  CHECK(full_match(s, R"("")"));
  CHECK(full_match(s, R"("a\"b\\c\n\u00e9")"));
  CHECK(full_match(s, "\"h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80\""));
  CHECK_FALSE(full_match(s, "\"a\nb\""));           // a raw control character
  CHECK_FALSE(full_match(s, R"("\x")"));           // not a JSON escape
  CHECK_FALSE(full_match(s, R"("\ud800")"));       // a lone surrogate escape
  CHECK_FALSE(full_match(s, "\"\xC3\""));          // a truncated UTF-8 sequence
  CHECK_FALSE(full_match(s, "\"\xED\xA0\x80\""));  // a UTF-8-encoded surrogate
  auto len = schema(R"({"type":"string","minLength":2,"maxLength":3})");
  CHECK_FALSE(full_match(len, R"("a")"));
  CHECK(full_match(len, R"("ab")"));
  CHECK(full_match(len, "\"\xC3\xA9\xC3\xA9\xC3\xA9\""));  // three characters, six bytes
  CHECK(full_match(len, R"("\n\t")"));                   // two characters
  CHECK_FALSE(full_match(len, R"("abcd")"));
}

TEST_CASE("pattern: the documented regex subset, search semantics, no escapes needed", "[grammar]") {
  auto p = schema(R"({"type":"string","pattern":"^[a-c]{2}x?$"})");
  CHECK(full_match(p, R"("ab")"));
  CHECK(full_match(p, R"("cax")"));
  CHECK_FALSE(full_match(p, R"("abxx")"));
  CHECK_FALSE(full_match(p, R"("ad")"));
  auto d = schema(R"({"type":"string","pattern":"^\\d{3}-(ab|cd)+$"})");
  CHECK(full_match(d, R"("123-abcdab")"));
  CHECK_FALSE(full_match(d, R"("12-ab")"));
  auto unanchored = schema(R"({"type":"string","pattern":"ab"})");
  CHECK(full_match(unanchored, R"("zzabzz")"));
  CHECK_FALSE(full_match(unanchored, R"("zzbazz")"));
  auto neg = schema(R"({"type":"string","pattern":"^[^a-z]+$"})");
  CHECK(full_match(neg, "\"A1\xC3\xA9\""));
  CHECK_FALSE(full_match(neg, R"("Ab")"));
  CHECK_FALSE(full_match(neg, R"("A\"")"));  // the quote is never produced by a pattern
}

TEST_CASE("objects: key order, required, optional, additionalProperties", "[grammar]") {
  auto o = schema(R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"boolean"},"c":{"type":"null"}},
                      "required":["b"],"additionalProperties":false})");
  CHECK(full_match(o, R"({"b":1})"));
  CHECK(full_match(o, R"({"a":true,"b":1,"c":null})"));
  CHECK(full_match(o, R"({"b":1,"c":null})"));
  CHECK_FALSE(full_match(o, R"({"a":true})"));         // b is required
  CHECK_FALSE(full_match(o, R"({"b":1,"a":true})"));   // keys in the schema's (sorted) order
  CHECK_FALSE(full_match(o, R"({"b":1,"d":2})"));
  CHECK_FALSE(full_match(o, R"({ "b":1})"));           // compact: no whitespace
  auto req_only = schema(R"({"type":"object","required":["x"]})");
  CHECK(full_match(req_only, R"({"x":[1,{"y":"z"}]})"));
  auto map = schema(R"({"type":"object","additionalProperties":{"type":"integer","minimum":0}})");
  CHECK(full_match(map, R"({"k":1,"j":22})"));
  CHECK_FALSE(full_match(map, R"({"k":-1})"));
  CHECK(full_match(schema(R"({"type":"object"})"), R"({"any":{"thing":[true,null,1.5]}})"));
  CHECK(full_match(schema(R"({"type":"object","additionalProperties":false})"), "{}"));
  auto quoted_key = schema(R"({"type":"object","properties":{"q\"t":{"const":1}},"required":["q\"t"]})");
  CHECK(full_match(quoted_key, R"({"q\"t":1})"));
}

TEST_CASE("arrays: items, prefixItems, minItems, maxItems", "[grammar]") {
  auto a = schema(R"({"type":"array","items":{"type":"integer","minimum":0,"maximum":9},"minItems":1,"maxItems":3})");
  CHECK_FALSE(full_match(a, "[]"));
  CHECK(full_match(a, "[1]"));
  CHECK(full_match(a, "[1,2,3]"));
  CHECK_FALSE(full_match(a, "[1,2,3,4]"));
  CHECK_FALSE(full_match(a, "[10]"));
  auto p = schema(R"({"type":"array","prefixItems":[{"type":"boolean"},{"type":"null"}],"items":false})");
  CHECK(full_match(p, "[]"));
  CHECK(full_match(p, "[true]"));
  CHECK(full_match(p, "[true,null]"));
  CHECK_FALSE(full_match(p, "[true,null,1]"));
  CHECK_FALSE(full_match(p, "[null]"));
  auto pi = schema(R"({"type":"array","prefixItems":[{"type":"boolean"}],"items":{"type":"null"},"minItems":3})");
  CHECK_FALSE(full_match(pi, "[true,null]"));
  CHECK(full_match(pi, "[true,null,null,null]"));
  CHECK(full_match(schema(R"({"type":"array"})"), R"([1,"a",[],{}])"));
}

TEST_CASE("enum, const, type unions, anyOf/oneOf, $ref to $defs (recursive)", "[grammar]") {
  auto e = schema(R"({"enum":["red",3,null,{"k":[1,2]}]})");
  CHECK(full_match(e, R"("red")"));
  CHECK(full_match(e, "3"));
  CHECK(full_match(e, "null"));
  CHECK(full_match(e, R"({"k":[1,2]})"));
  CHECK_FALSE(full_match(e, R"("blue")"));
  auto typed = schema(R"({"type":"string","enum":["a",1]})");  // values of another type are dropped
  CHECK(full_match(typed, R"("a")"));
  CHECK_FALSE(full_match(typed, "1"));
  CHECK(full_match(schema(R"({"const":"x"})"), R"("x")"));
  auto u = schema(R"({"type":["integer","null"],"maximum":5})");
  CHECK(full_match(u, "5"));
  CHECK(full_match(u, "null"));
  CHECK_FALSE(full_match(u, "6"));
  auto any = schema(R"({"anyOf":[{"type":"boolean"},{"type":"string","maxLength":1}]})");
  CHECK(full_match(any, "true"));
  CHECK(full_match(any, R"("a")"));
  CHECK_FALSE(full_match(any, R"("ab")"));
  auto tree = schema(R"({"$defs":{"n":{"type":"object","properties":{"v":{"type":"integer"},"k":{"type":"array","items":{"$ref":"#/$defs/n"}}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/n"})");
  CHECK(full_match(tree, R"({"k":[{"k":[{"v":3}],"v":2}],"v":1})"));
  CHECK_FALSE(full_match(tree, R"({"k":[{"k":[{}],"v":2}],"v":1})"));
}

TEST_CASE("any JSON object (response_format json_object)", "[grammar]") {
  auto g = compile_any_json_object();
  REQUIRE(g);
  CHECK(full_match(*g, R"({"a":[1,2,{"b":null}],"c":"d"})"));
  CHECK(full_match(*g, "{}"));
  CHECK_FALSE(full_match(*g, "[1]"));
  CHECK_FALSE(full_match(*g, R"("a")"));
}

TEST_CASE("every unsupported keyword is refused by name (hazard: silently unconstrained output)", "[grammar]") {
  for (const char* k : {"format", "multipleOf", "minProperties", "maxProperties", "patternProperties", "propertyNames",
                        "allOf", "not", "if", "then", "else", "contains", "minContains", "dependentRequired",
                        "dependentSchemas", "unevaluatedProperties", "unevaluatedItems", "contentEncoding", "$dynamicRef"}) {
    INFO(k);
    CHECK(schema_error(std::string(R"({"type":"string",")") + k + R"(":1})") ==
          std::string("unsupported JSON Schema keyword '") + k + "' at the schema root");
  }
  CHECK(schema_error(R"({"type":"object","properties":{"when":{"type":"string","format":"date-time"}}})") ==
        "unsupported JSON Schema keyword 'format' at /properties/when");
  CHECK(schema_error(R"({"type":"array","items":{"anyOf":[{"type":"integer"},{"type":"string","format":"email"}]}})") ==
        "unsupported JSON Schema keyword 'format' at /items/anyOf/1");
}

TEST_CASE("refused combinations name the keyword and the path", "[grammar]") {
  CHECK(schema_error(R"({"type":"number","minimum":0})") ==
        "'minimum' on type number (bounds are enforced for integers only) at the schema root is not supported");
  CHECK(schema_error(R"({"type":"array","uniqueItems":true})") == "'uniqueItems' true at the schema root is not supported");
  CHECK(schema_error(R"({"type":"array","items":[{"type":"integer"}]})") ==
        "'items' as an array (draft 2020-12 uses 'prefixItems') at the schema root is not supported");
  CHECK(schema_error(R"({"$defs":{"a":{"type":"integer"}},"properties":{"x":{"$ref":"#/$defs/a","maximum":3}}})") ==
        "'$ref' with sibling keyword 'maximum' at /properties/x is not supported");
  CHECK(schema_error(R"({"type":"object","anyOf":[{"required":["a"]}]})") ==
        "'anyOf' with sibling keyword 'type' at the schema root is not supported");
  CHECK(schema_error(R"({"$ref":"http://example.com/s.json"})") ==
        "'$ref' to 'http://example.com/s.json' (only local '#...' pointers) at the schema root is not supported");
  CHECK(schema_error(R"({"$ref":"#/$defs/missing"})") == "JSON Schema root: '$ref' '#/$defs/missing' does not resolve");
  CHECK(schema_error(R"({"type":"string","pattern":"^a(?=b)$"})") ==
        "JSON Schema root: pattern '^a(?=b)$': only the (?: ) group form is supported at offset 3 (see the regex subset in docs/design/grammar.md)");
  CHECK(schema_error(R"({"type":"string","pattern":"\\bword"})") ==
        "JSON Schema root: pattern '\\bword': escape '\\b' is not supported at offset 1 (see the regex subset in docs/design/grammar.md)");
  CHECK(schema_error(R"({"type":"string","pattern":"a^b"})") ==
        "JSON Schema root: pattern 'a^b': anchors are only supported first ('^') and last ('$') at offset 1 (see the regex subset in docs/design/grammar.md)");
  CHECK(schema_error(R"({"type":"string","pattern":"^a$","maxLength":3})") ==
        "'pattern' together with 'minLength'/'maxLength' at the schema root is not supported");
  CHECK(schema_error(R"({"type":"string","maxLength":100000})") ==
        "'maxLength' 100000 (above 4096) at the schema root is not supported");
  CHECK(schema_error(R"({"properties":{"a":false}})") ==
        "the schema 'false' (no value can satisfy it) at /properties/a is not supported");
  CHECK(schema_error(R"({"type":"strin"})") == "JSON Schema root: 'type' \"strin\" is not a JSON type");
  CHECK(schema_error(R"({"type":"integer","minimum":5,"maximum":4})") == "JSON Schema root: the integer range is empty");
  CHECK(schema_error(R"({"type":"object","required":["z"],"properties":{"a":{}},"additionalProperties":false})") ==
        "JSON Schema root: required property 'z' is not in 'properties' and 'additionalProperties' is false");
}

TEST_CASE("annotations are accepted and do not constrain", "[grammar]") {
  auto g = schema(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","title":"t","description":"d",
                      "type":"boolean","default":true,"examples":[false],"$comment":"c","deprecated":false})");
  CHECK(full_match(g, "true"));
  CHECK(full_match(g, "false"));
}

}  // namespace waste::grammar::test

// The token mask against a brute force: for random prefixes of random walks through each
// grammar, the mask's allowed set equals re-running the automaton over every token's bytes.
// The vocabulary mixes single bytes, JSON punctuation runs, words, digits and UTF-8 pieces (whole
// and split), so tokens cross rule boundaries, leave stacks deeper than the cached context and
// split multi-byte characters.
#include <cmath>
#include <set>

#include "compute/sampling/grammar/token_index.hpp"
#include "tests/grammar/grammar_test_support.hpp"

namespace waste::grammar::test {
namespace {

std::vector<std::string> test_vocabulary(Rng& rng) {
  std::set<std::string> v;
  for (int b = 1; b < 256; ++b) v.insert(std::string(1, char(b)));
  const std::vector<std::string> pieces = {"{", "}", "[", "]", "\"", ":", ",", "{\"", "\":", "\",\"", "\"}", "}]", "]}",
                                           "\":\"", "true", "false", "null", "tr", "ue", "nu", "-", "0", "12", "345",
                                           "\\", "\\n", "\\u00", "e9", "a", "ab", "name", " the", "id", "kind", "x-y",
                                           "\xC3", "\xA9", "\xC3\xA9", "\xE2\x82\xAC", "\xE2\x82", "\xF0\x9F\x98\x80",
                                           "1.5", "e+", "E", ".", "+", "*", "(", ")", "\n", " "};
  for (const auto& p : pieces) v.insert(p);
  while (v.size() < 900) {
    std::string t;
    const std::size_t n = 1 + rng.below(4);
    for (std::size_t k = 0; k < n; ++k) t += pieces[rng.below(pieces.size())];
    v.insert(t);
  }
  std::vector<std::string> out;
  out.push_back("<special>");
  out.push_back("<eos>");
  out.insert(out.end(), v.begin(), v.end());
  out.push_back("");  // a gap in the vocabulary
  return out;
}

void check_walks(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenIndex>& index, Rng& rng,
                 int walks, int max_steps, int& checked) {
  const std::size_t vocab = std::size_t(index->vocab());
  std::vector<std::uint64_t> words((vocab + 63) / 64);
  for (int w = 0; w < walks; ++w) {
    Matcher m(g, index);
    for (int step = 0; step < max_steps && !m.finished(); ++step) {
      m.fill_allowed(words);
      std::vector<int> allowed;
      for (std::size_t t = 0; t < vocab; ++t) {
        const bool masked = (words[t >> 6] >> (t & 63)) & 1u;
        const bool brute = m.allows_token(int(t));
        INFO("walk " << w << " step " << step << " token " << t << " " << index->bytes(int(t)));
        REQUIRE(masked == brute);
        if (masked) allowed.push_back(int(t));
      }
      ++checked;
      REQUIRE_FALSE(allowed.empty());
      // Prefer continuing (an early eos would keep the walks short).
      int pick = allowed[rng.below(allowed.size())];
      if (pick == 1 && allowed.size() > 1 && rng.below(4) != 0) pick = allowed[(rng.below(allowed.size() - 1) + 1) % allowed.size()];
      if (pick == 1) pick = allowed[rng.below(allowed.size())];
      REQUIRE(m.accept_token(pick));
      if (pick == 1) break;
    }
  }
}

}  // namespace

TEST_CASE("mask equals brute force on random prefixes (JSON Schemas and EBNF, seeded)", "[grammar]") {
  Rng rng{20261201};
  auto built = build_token_index(test_vocabulary(rng), {0}, {1});
  REQUIRE(built);
  const auto index = *built;
  const std::vector<std::string> schemas = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"id":{"type":"integer","minimum":-20,"maximum":300},
          "tags":{"type":"array","items":{"enum":["a","ab","x-y"]},"maxItems":3},"ok":{"type":"boolean"}},"required":["name","id"],"additionalProperties":false})",
      R"({"type":"array","items":{"type":"array","items":{"type":"object","properties":{"kind":{"type":["string","null"]},
          "v":{"type":"array","items":{"type":"number"},"maxItems":2}},"required":["kind"],"additionalProperties":false},"maxItems":2},"maxItems":3})",
      R"({"$defs":{"n":{"type":"object","properties":{"id":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/n"},"maxItems":2}},
          "required":["id"],"additionalProperties":false}},"$ref":"#/$defs/n"})",
      R"({"anyOf":[{"type":"string","pattern":"^(ab|\u00e9)+-\\d{2}$"},{"type":"object"},{"const":"name"}]})",
      R"({"type":"string"})",
      // Longer than any token: the cache shares one entry deep in the repetition (canonical()).
      R"({"type":"array","items":{"type":"string","minLength":2,"maxLength":90},"maxItems":2})",
  };
  const std::vector<std::string> grammars = {
      "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\nterm ::= [0-9]+ | \"(\" expr \")\"\n",
      "root ::= (word \" \")* word \"\\n\"?\nword ::= [a-z\\u00e9]+ | \"\\u20ac\"\n",
      "root ::= [a-z ]{0,70} (\"a\"? \"e9\"?){0,60} \"!\"\n",
  };
  // Under ASan (a Debug build, ~30x slower) fewer walks: the same code paths, a CI-sized cost.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int kWalks = 2, kMinChecked = 150;
#else
  constexpr int kWalks = 12, kMinChecked = 1000;
#endif
  int checked = 0;
  for (const auto& s : schemas) check_walks(schema(s), index, rng, kWalks, 40, checked);
  for (const auto& e : grammars) check_walks(ebnf(e), index, rng, kWalks, 40, checked);
  auto obj = compile_any_json_object();
  REQUIRE(obj);
  check_walks(*obj, index, rng, kWalks, 40, checked);
  CHECK(checked > kMinChecked);
}

TEST_CASE("the matcher: eos only when accepting, finished, forced bytes, copies fork", "[grammar]") {
  auto g = schema(R"({"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":99}},"required":["a"],"additionalProperties":false})");
  const auto index = byte_index();
  Matcher m(g, index);
  CHECK_FALSE(m.allows_token(256));
  CHECK(m.accept_token(256).error().message == "grammar: eos token 256 before the match is complete");
  CHECK(m.accept_token('x').error().message == "grammar: token 120 (\"x\") is not allowed here");
  REQUIRE(m.accept_bytes("{\"a\":4"));
  Matcher fork = m;
  REQUIRE(m.accept_bytes("2}"));
  CHECK(m.accepting());
  CHECK(m.finished());
  CHECK(m.allows_token(256));
  REQUIRE(m.accept_token(256));
  CHECK(m.accept_token('x').error().message == "grammar: token 120 after the end of the match");
  // The fork is still inside the number.
  CHECK_FALSE(fork.accepting());
  CHECK(fork.allows_bytes("}"));
  CHECK(fork.allows_bytes("5}"));
  CHECK_FALSE(fork.allows_bytes("55}"));
  std::vector<float> logits(257, 1.0f);
  fork.mask_logits(logits);
  for (int t = 0; t < 257; ++t) {
    INFO(t);
    CHECK(std::isfinite(logits[std::size_t(t)]) == ((t >= '0' && t <= '9') || t == '}'));
  }
  CHECK(build_token_index({"a"}, {3}, {}).error().message == "token index: special id 3 is outside the vocabulary of 1");
}

}  // namespace waste::grammar::test

// Shared by the grammar tests: a byte-level token index (one token per byte), whole-text
// matching, and a small seeded generator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "compute/sampling/grammar/grammar.hpp"

namespace waste::grammar::test {

// Token b = the single byte b, plus token 256 = eos.
inline std::shared_ptr<const TokenIndex> byte_index() {
  static const auto index = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
    tokens.emplace_back("<eos>");
    auto r = build_token_index(std::move(tokens), {}, {256});
    REQUIRE(r);
    return *r;
  }();
  return index;
}

// The whole text is a complete match.
inline bool full_match(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g, byte_index());
  return m.accept_bytes(text).has_value() && m.accepting();
}
// The text is a prefix of some match.
inline bool prefix_ok(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g, byte_index());
  return m.accept_bytes(text).has_value();
}

inline std::shared_ptr<const Grammar> schema(const std::string& text) {
  auto g = compile_json_schema(nlohmann::json::parse(text));
  INFO(text);
  if (!g) FAIL(g.error().message);
  return *g;
}
inline std::string schema_error(const std::string& text) {
  auto g = compile_json_schema(nlohmann::json::parse(text));
  if (g) return "(compiled)";
  return g.error().message;
}
inline std::shared_ptr<const Grammar> ebnf(const std::string& text) {
  auto g = compile_ebnf(text);
  INFO(text);
  if (!g) FAIL(g.error().message);
  return *g;
}
inline std::string ebnf_error(const std::string& text) {
  auto g = compile_ebnf(text);
  if (g) return "(compiled)";
  return g.error().message;
}

// splitmix64: portable, seeded.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return std::size_t(next() % n); }
};

}  // namespace waste::grammar::test

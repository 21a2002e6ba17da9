// The grammar IR every front end (JSON Schema, EBNF, regex) builds: rules whose bodies are
// expressions over byte sets. GrammarBuilder lowers them into the automaton (automaton.hpp).
#pragma once

#include <bitset>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "compute/sampling/grammar/grammar.hpp"
#include "shared/result.hpp"

namespace waste::grammar {

class Grammar;
using ByteSet = std::bitset<256>;

struct Expr {
  enum class Kind : std::uint8_t { bytes, seq, alt, ref, repeat };
  Kind kind = Kind::seq;
  ByteSet set;              // bytes
  int rule = -1;            // ref
  int min = 0, max = 0;     // repeat; max < 0 = unbounded
  std::vector<Expr> kids;   // seq, alt (the alternatives), repeat (one kid)

  static Expr byte_set(const ByteSet& s);
  static Expr byte(unsigned char b);
  static Expr byte_range(unsigned char lo, unsigned char hi);
  static Expr literal(std::string_view bytes);
  static Expr seq(std::vector<Expr> kids);
  static Expr alt(std::vector<Expr> kids);  // no kids = matches nothing
  static Expr ref(int rule);
  static Expr repeat(Expr kid, int min, int max);
  static Expr empty() { return seq({}); }
};

// The time limit's refusal once `started + limits.max_time` has passed, else ok.
Status check_compile_time(const CompileLimits& limits, std::chrono::steady_clock::time_point started);

class GrammarBuilder {
 public:
  // Declares a rule (body set later by define); names must be unique.
  int declare(std::string name);
  void define(int rule, Expr body);
  int add(std::string name, Expr body);
  [[nodiscard]] std::optional<int> find(std::string_view name) const;
  [[nodiscard]] const std::string& name(int rule) const { return names_[std::size_t(rule)]; }
  [[nodiscard]] bool defined(int rule) const { return bodies_[std::size_t(rule)].has_value(); }
  [[nodiscard]] int size() const { return int(names_.size()); }
  [[nodiscard]] const Expr& body(int rule) const { return *bodies_[std::size_t(rule)]; }

  // Lowers every rule; refuses undefined or left-recursive rules, grammars over the size cap, and
  // grammars past `limits` (expansion derivations; the time since `started`).
  Result<std::shared_ptr<const Grammar>> build(int root, const CompileLimits& limits = {},
                                               std::chrono::steady_clock::time_point started =
                                                   std::chrono::steady_clock::now()) const;

 private:
  std::vector<std::string> names_;
  std::vector<std::optional<Expr>> bodies_;
  std::unordered_map<std::string, int> by_name_;
};

}  // namespace waste::grammar

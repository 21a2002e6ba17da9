// The compiled grammar: a byte-level pushdown automaton in the GBNF style (llama.cpp's
// representation, with explicit stacks). Every rule is a list of alternatives; an alternative is
// a run of elements in one flat array ending with `end`. An element is a byte set or a rule
// reference. A stack holds element positions, the top (back) always a byte set that the next
// byte must match; below it the continuations of the enclosing rules. The matcher's state is a
// set of such stacks (one per live parse); an empty stack = the root rule is complete.
// A reference in the last position of an alternative is a tail call (its continuation is not
// pushed), so right-recursive loops run in constant stack depth.
// Expansion (resolving a stack's top to byte sets) de-duplicates as it goes: a stack reached a
// second time through another alternative is not walked again, so alternatives that lead to the
// same place cost once. It is bounded too (kMaxStepWork stacks walked, kMaxStacks kept per
// step): past either the step fails as an overflow instead of running on. Compilation refuses
// grammars where one byte's expansion may walk more than CompileLimits::max_expansion
// derivations (expr.cpp), so a grammar that passed it overflows only on pathological nesting.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace waste::grammar {

class MaskCache;
class TokenIndex;

using Stack = std::vector<std::int32_t>;
using StackSet = std::vector<Stack>;  // sorted, unique

class Grammar {
 public:
  enum class Kind : std::uint8_t { bytes, ref, end };
  struct Element {
    Kind kind;
    std::int32_t value;  // bytes: index into sets_; ref: rule id
  };
  struct Rule {
    std::string name;
    std::vector<std::int32_t> alts;  // start positions (a rule's elements are contiguous)
    // Counted repetition x{m,n} lowers to a chain O1..O(n-m) of rules laid out alike; Oj = "up
    // to j more x". chain: index into chains_ (-1: not in one), chain_index: j.
    std::int32_t chain = -1;
    std::int32_t chain_index = 0;
  };

  Grammar(std::vector<Element> elements, std::vector<std::array<std::uint64_t, 4>> sets, std::vector<Rule> rules,
          std::vector<std::vector<std::int32_t>> chains, int root);

  struct Expansion;  // automaton.cpp: the worklist and the stacks seen in one step (per thread)
  // Runtime bounds of one step (see above).
  static constexpr std::size_t kMaxStepWork = std::size_t(1) << 20;
  static constexpr std::size_t kMaxStacks = std::size_t(1) << 16;

  // The stacks before any byte (empty, with *overflow set, past the bounds).
  [[nodiscard]] StackSet initial(bool* overflow = nullptr) const;
  // out = every stack of `in` advanced by byte b (normalized, sorted, unique). out != in.
  // False (out empty) when the expansion went past the bounds.
  bool step(const StackSet& in, unsigned char b, StackSet& out) const;
  // Bytes through a stack set; false (and `set` emptied) when some byte leaves the grammar, or
  // the expansion overflows (then *overflow is set).
  bool advance(StackSet& set, std::string_view bytes, bool* overflow = nullptr) const;
  [[nodiscard]] bool matches(std::int32_t pos, unsigned char b) const {
    const auto& s = sets_[std::size_t(elements_[std::size_t(pos)].value)];
    return (s[b >> 6] >> (b & 63)) & 1u;
  }
  [[nodiscard]] std::size_t element_count() const { return elements_.size(); }
  [[nodiscard]] std::size_t rule_count() const { return rules_.size(); }

  // The precomputed token sets of this grammar for one token index, shared by every Matcher of
  // the pair (created on first use, kept while both live).
  std::shared_ptr<MaskCache> cache_for(const std::shared_ptr<const TokenIndex>& index) const;

  // A position with the same future as pos for every byte string of at most `horizon` bytes: in a
  // chain rule Oj with j > horizon (no such string can use up its repetitions) the same place in
  // O(horizon + 1). Lets the mask cache share one entry across a long counted repetition.
  [[nodiscard]] std::int32_t canonical(std::int32_t pos, std::size_t horizon) const;

  static void normalize(StackSet& set);
  static bool has_empty(const StackSet& set);
  static bool has_live(const StackSet& set);  // a non-empty stack

 private:
  // Resolves the worklist's stacks (top maybe a ref or end) to byte-set tops, into out; false on
  // overflow.
  bool expand(Expansion& ex, StackSet& out) const;

  std::vector<Element> elements_;
  std::vector<std::array<std::uint64_t, 4>> sets_;
  std::vector<Rule> rules_;
  std::vector<std::vector<std::int32_t>> chains_;  // rule ids, chain_index 1, 2, ...
  std::vector<std::int32_t> rule_of_;              // element position -> rule
  int root_;
  mutable std::mutex cache_mutex_;  // guards caches_
  mutable std::vector<std::pair<std::weak_ptr<const TokenIndex>, std::shared_ptr<MaskCache>>> caches_;
};

}  // namespace waste::grammar

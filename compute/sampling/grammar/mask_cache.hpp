// Token sets precomputed per grammar context, XGrammar-style. For a stack, the key is its top
// kContext positions. Walking the sorted vocabulary from that partial stack sorts every token
// into: accepted (its bytes are consumed without leaving the partial stack: allowed whatever lies
// below), rejected (it fails inside the partial stack), or uncertain (it pops out of the partial
// stack with bytes left: only the full stack can decide). A key covering the whole stack has no
// uncertain tokens. The mask of a step ORs the accepted sets of its stacks and checks the few
// uncertain tokens against the full stack. Entries are computed on first use and kept.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "compute/sampling/grammar/automaton.hpp"
#include "compute/sampling/grammar/token_index.hpp"

namespace waste::grammar {

struct TokenSet {
  std::vector<std::uint64_t> accepted_bits;  // dense form (many accepted) or empty
  std::vector<std::int32_t> accepted_ids;    // sparse form
  std::vector<std::int32_t> uncertain;
};

// verdict(token id, v) for every ordinary token, v: 0 rejected, 1 accepted, 2 uncertain. With
// partial = false an empty stack means the grammar is complete (no uncertain tokens).
enum class Verdict : std::uint8_t { rejected, accepted, uncertain };
template <class F>
void walk_vocabulary(const Grammar& g, const TokenIndex& index, const StackSet& start, bool partial, F&& verdict);

class MaskCache {
 public:
  static constexpr std::size_t kContext = 4;

  MaskCache(const Grammar& grammar, const TokenIndex& index) : grammar_(grammar), index_(index) {}

  // The sets for this stack (non-empty); thread-safe; the reference stays valid.
  const TokenSet& lookup(const Stack& stack);
  [[nodiscard]] std::size_t entries() const;

 private:
  std::unique_ptr<TokenSet> compute(const Stack& suffix, bool partial) const;

  const Grammar& grammar_;
  const TokenIndex& index_;
  mutable std::mutex mutex_;  // guards entries_ (a miss computes outside it)
  std::unordered_map<std::string, std::unique_ptr<TokenSet>> entries_;
};

template <class F>
void walk_vocabulary(const Grammar& g, const TokenIndex& index, const StackSet& start, bool partial, F&& verdict) {
  const auto sorted = index.sorted();
  const auto lcp = index.lcp();
  std::vector<StackSet> level(index.max_length() + 1);
  std::vector<char> ctx(index.max_length() + 1, 0);  // an empty stack was seen at depth <= d
  level[0] = start;
  ctx[0] = partial && Grammar::has_empty(start);
  std::size_t valid = 0;          // level[0..valid] belong to the previous token's prefix
  std::size_t dead = 0;           // > 0: the previous token's prefix of this length is dead
  Verdict dead_verdict = Verdict::rejected;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const std::string& tok = index.bytes(sorted[i]);
    const std::size_t shared = lcp[i];
    if (dead > 0 && shared >= dead) {
      verdict(sorted[i], dead_verdict);
      continue;
    }
    dead = 0;
    std::size_t d = std::min<std::size_t>(shared, valid);
    while (d < tok.size()) {
      if (d > 0 && !Grammar::has_live(level[d])) break;
      g.step(level[d], static_cast<unsigned char>(tok[d]), level[d + 1]);
      ctx[d + 1] = ctx[d] || (partial && Grammar::has_empty(level[d + 1]));
      ++d;
    }
    valid = d;
    if (d < tok.size()) {
      // No live stack after d bytes: every longer token with this prefix ends the same way.
      dead = d;
      dead_verdict = ctx[d] ? Verdict::uncertain : Verdict::rejected;
      verdict(sorted[i], dead_verdict);
      continue;
    }
    if (!level[d].empty()) {
      verdict(sorted[i], Verdict::accepted);
    } else {
      verdict(sorted[i], ctx[d] ? Verdict::uncertain : Verdict::rejected);
    }
  }
}

}  // namespace waste::grammar

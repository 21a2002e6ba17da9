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

// Stack sets interned as states with a lazily filled byte transition table: a walk over the
// vocabulary meets the same few sets again and again (inside a string every byte leads back to
// one set), so after the first visit a byte costs one table read instead of stack copies.
class SetDfa {
 public:
  explicit SetDfa(const Grammar& g) : g_(g) {}
  std::int32_t intern(const StackSet& set);
  std::int32_t step(std::int32_t state, unsigned char b);
  [[nodiscard]] bool live(std::int32_t state) const { return info_[std::size_t(state)] & 1u; }
  [[nodiscard]] bool has_empty(std::int32_t state) const { return info_[std::size_t(state)] & 2u; }
  [[nodiscard]] std::size_t states() const { return sets_.size(); }

 private:
  const Grammar& g_;
  std::unordered_map<std::string, std::int32_t> ids_;
  std::vector<StackSet> sets_;
  std::vector<std::uint8_t> info_;        // bit 0: a non-empty stack; bit 1: an empty stack
  std::vector<std::int32_t> next_;        // state * 256 + byte -> state, -1 = not computed
  StackSet scratch_;
};

enum class Verdict : std::uint8_t { rejected, accepted, uncertain };

// verdict(token id, v) for every ordinary token from the stacks `start` that is accepted or
// uncertain, and for some rejected ones (a run dead at its first byte is skipped). With
// partial = false an empty stack means the grammar is complete (so nothing is uncertain).
template <class F>
void walk_vocabulary(SetDfa& dfa, const TokenIndex& index, std::int32_t start, bool partial, F&& verdict);

class MaskCache {
 public:
  static constexpr std::size_t kContext = 4;

  MaskCache(const Grammar& grammar, const TokenIndex& index)
      : grammar_(grammar), index_(index), dfa_(std::make_unique<SetDfa>(grammar)) {}

  // The sets for this stack (non-empty); thread-safe; the reference stays valid.
  const TokenSet& lookup(const Stack& stack);
  [[nodiscard]] std::size_t entries() const;

 private:
  std::unique_ptr<TokenSet> compute(const Stack& suffix, bool partial);

  const Grammar& grammar_;
  const TokenIndex& index_;
  mutable std::mutex mutex_;  // guards entries_ and dfa_ (a miss computes under it)
  std::unordered_map<std::string, std::unique_ptr<TokenSet>> entries_;
  std::unique_ptr<SetDfa> dfa_;  // restarted between walks past kMaxDfaStates (1 KiB each)
  static constexpr std::size_t kMaxDfaStates = 1u << 16;
};

template <class F>
void walk_vocabulary(SetDfa& dfa, const TokenIndex& index, std::int32_t start, bool partial, F&& verdict) {
  const auto sorted = index.sorted();
  const auto lcp = index.lcp();
  std::vector<std::int32_t> level(index.max_length() + 1);
  std::vector<char> ctx(index.max_length() + 1, 0);  // an empty stack was seen at depth <= d
  level[0] = start;
  ctx[0] = partial && dfa.has_empty(start);
  std::size_t valid = 0;  // level[0..valid] belong to the previous token's prefix
  std::size_t dead = 0;   // > 0: the previous token's prefix of this length is dead
  Verdict dead_verdict = Verdict::rejected;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const std::string_view tok = index.sorted_bytes(i);
    const std::size_t shared = lcp[i];
    if (dead > 0 && shared >= dead) {
      if (dead == 1 && dead_verdict == Verdict::rejected) {
        // Dead at the first byte: skip the rest of that byte's run.
        i = index.first_byte_end(static_cast<unsigned char>(tok[0])) - 1;
        continue;
      }
      verdict(sorted[i], dead_verdict);
      continue;
    }
    dead = 0;
    std::size_t d = std::min<std::size_t>(shared, valid);
    while (d < tok.size()) {
      if (d > 0 && !dfa.live(level[d])) break;
      level[d + 1] = dfa.step(level[d], static_cast<unsigned char>(tok[d]));
      ctx[d + 1] = ctx[d] || (partial && dfa.has_empty(level[d + 1]));
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
    if (dfa.live(level[d]) || dfa.has_empty(level[d])) {
      verdict(sorted[i], Verdict::accepted);
    } else {
      verdict(sorted[i], ctx[d] ? Verdict::uncertain : Verdict::rejected);
    }
  }
}

}  // namespace waste::grammar

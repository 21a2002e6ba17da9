#include "compute/sampling/grammar/mask_cache.hpp"

#include <algorithm>

namespace waste::grammar {

const TokenSet& MaskCache::lookup(const Stack& stack) {
  const std::size_t n = std::min(stack.size(), kContext);
  Stack suffix(stack.end() - std::ptrdiff_t(n), stack.end());
  // No token can use up more than max_length() repetitions: deep in a long counted repetition
  // every place shares one entry.
  for (std::int32_t& pos : suffix) pos = grammar_.canonical(pos, index_.max_length());
  const bool partial = stack.size() > kContext;
  std::string key(reinterpret_cast<const char*>(suffix.data()), suffix.size() * sizeof(std::int32_t));
  key += partial ? 'p' : 'f';
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(key); it != entries_.end()) return *it->second;
  // Computed under the lock (the DFA is shared): matchers missing at once take turns.
  auto [it, fresh] = entries_.emplace(std::move(key), compute(suffix, partial));
  return *it->second;
}

std::size_t MaskCache::entries() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::int32_t SetDfa::intern(const StackSet& set) {
  std::string key;
  for (const Stack& s : set) {
    key.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(std::int32_t));
    key.append(4, '\xff');  // no position is -1: a separator
  }
  auto [it, fresh] = ids_.emplace(std::move(key), std::int32_t(sets_.size()));
  if (fresh) {
    sets_.push_back(set);
    info_.push_back(std::uint8_t((Grammar::has_live(set) ? 1u : 0u) | (Grammar::has_empty(set) ? 2u : 0u)));
    next_.resize(next_.size() + 256, -1);
  }
  return it->second;
}

std::int32_t SetDfa::step(std::int32_t state, unsigned char b) {
  const std::size_t slot = std::size_t(state) * 256 + b;
  if (next_[slot] >= 0) return next_[slot];
  g_.step(sets_[std::size_t(state)], b, scratch_);
  const std::int32_t to = intern(scratch_);
  next_[slot] = to;
  return to;
}

std::unique_ptr<TokenSet> MaskCache::compute(const Stack& suffix, bool partial) {
  auto set = std::make_unique<TokenSet>();
  const std::size_t words = (std::size_t(index_.vocab()) + 63) / 64;
  std::vector<std::uint64_t> bits(words, 0);
  std::size_t accepted = 0;
  if (dfa_->states() > kMaxDfaStates) dfa_ = std::make_unique<SetDfa>(grammar_);
  walk_vocabulary(*dfa_, index_, dfa_->intern(StackSet{suffix}), partial, [&](std::int32_t id, Verdict v) {
    if (v == Verdict::accepted) {
      bits[std::size_t(id) >> 6] |= std::uint64_t(1) << (id & 63);
      ++accepted;
    } else if (v == Verdict::uncertain) {
      set->uncertain.push_back(id);
    }
  });
  // Dense when a bitset is smaller than the id list.
  if (accepted * 32 > std::size_t(index_.vocab())) {
    set->accepted_bits = std::move(bits);
  } else {
    set->accepted_ids.reserve(accepted);
    for (std::size_t w = 0; w < words; ++w) {
      for (std::uint64_t x = bits[w]; x != 0; x &= x - 1) set->accepted_ids.push_back(std::int32_t(w * 64 + std::size_t(__builtin_ctzll(x))));
    }
  }
  return set;
}

}  // namespace waste::grammar

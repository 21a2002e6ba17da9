#include "compute/sampling/grammar/mask_cache.hpp"

#include <algorithm>

namespace waste::grammar {

const TokenSet& MaskCache::lookup(const Stack& stack) {
  const std::size_t n = std::min(stack.size(), kContext);
  const Stack suffix(stack.end() - std::ptrdiff_t(n), stack.end());
  const bool partial = stack.size() > kContext;
  std::string key(reinterpret_cast<const char*>(suffix.data()), suffix.size() * sizeof(std::int32_t));
  key += partial ? 'p' : 'f';
  {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(key); it != entries_.end()) return *it->second;
  }
  // Computed unlocked: two matchers missing the same key both compute; one result is kept.
  auto set = compute(suffix, partial);
  std::lock_guard lock(mutex_);
  auto [it, fresh] = entries_.emplace(std::move(key), std::move(set));
  return *it->second;
}

std::size_t MaskCache::entries() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::unique_ptr<TokenSet> MaskCache::compute(const Stack& suffix, bool partial) const {
  auto set = std::make_unique<TokenSet>();
  std::vector<std::int32_t> accepted;
  walk_vocabulary(grammar_, index_, StackSet{suffix}, partial, [&](std::int32_t id, Verdict v) {
    if (v == Verdict::accepted) {
      accepted.push_back(id);
    } else if (v == Verdict::uncertain) {
      set->uncertain.push_back(id);
    }
  });
  const std::size_t words = (std::size_t(index_.vocab()) + 63) / 64;
  // Dense when a bitset is smaller than the id list.
  if (accepted.size() * 32 > std::size_t(index_.vocab())) {
    set->accepted_bits.assign(words, 0);
    for (std::int32_t id : accepted) set->accepted_bits[std::size_t(id) >> 6] |= std::uint64_t(1) << (id & 63);
  } else {
    set->accepted_ids = std::move(accepted);
  }
  return set;
}

}  // namespace waste::grammar

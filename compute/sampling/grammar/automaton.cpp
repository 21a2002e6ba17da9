#include "compute/sampling/grammar/automaton.hpp"

#include <algorithm>
#include <unordered_set>

#include "compute/sampling/grammar/mask_cache.hpp"

namespace waste::grammar {

Grammar::Grammar(std::vector<Element> elements, std::vector<std::array<std::uint64_t, 4>> sets, std::vector<Rule> rules,
                 std::vector<std::vector<std::int32_t>> chains, int root)
    : elements_(std::move(elements)), sets_(std::move(sets)), rules_(std::move(rules)), chains_(std::move(chains)),
      root_(root) {
  rule_of_.assign(elements_.size(), -1);
  for (std::size_t r = 0; r < rules_.size(); ++r) {
    for (std::int32_t pos : rules_[r].alts) {
      for (std::int32_t p = pos;; ++p) {
        rule_of_[std::size_t(p)] = std::int32_t(r);
        if (elements_[std::size_t(p)].kind == Kind::end) break;
      }
    }
  }
}

std::int32_t Grammar::canonical(std::int32_t pos, std::size_t horizon) const {
  const Rule& rule = rules_[std::size_t(rule_of_[std::size_t(pos)])];
  if (rule.chain < 0 || std::size_t(rule.chain_index) <= horizon + 1) return pos;
  const Rule& same = rules_[std::size_t(chains_[std::size_t(rule.chain)][horizon])];  // chain_index horizon + 1
  return pos - rule.alts[0] + same.alts[0];
}

struct Grammar::Expansion {
  struct Hash {
    std::size_t operator()(const Stack& s) const noexcept {
      std::size_t h = s.size();
      for (std::int32_t v : s) h = (h ^ std::size_t(std::uint32_t(v))) * 0x100000001b3ull;
      return h;
    }
  };
  // A step's expansion is a handful of stacks almost always: the set is only used once one has
  // walked more than this many (a stack pushed before then may be walked twice, once).
  static constexpr std::size_t kDedupeAfter = 64;
  std::vector<Stack> work;
  std::unordered_set<Stack, Hash> seen;  // stacks pushed at a fork (a rule of several alternatives)
  void clear() {
    // What a pathological step grew is given back (clear() would also zero a grown bucket array on
    // every later step).
    work.clear();
    if (work.capacity() > 4096) work = {};
    if (!seen.empty()) seen = {};
  }
};

namespace {

// One scratch per thread: a step allocates nothing once warm.
Grammar::Expansion& scratch_expansion();

}  // namespace

StackSet Grammar::initial(bool* overflow) const {
  Expansion& ex = scratch_expansion();
  ex.clear();
  for (std::int32_t a : rules_[std::size_t(root_)].alts) ex.work.push_back(Stack{a});
  StackSet out;
  const bool ok = expand(ex, out);
  if (overflow) *overflow = !ok;
  if (!ok) out.clear();
  normalize(out);
  return out;
}

bool Grammar::expand(Expansion& ex, StackSet& out) const {
  // Left recursion is refused at build time, so this terminates; the bounds keep an ambiguous
  // grammar from running long or large.
  std::size_t work = 0;
  while (!ex.work.empty()) {
    Stack s = std::move(ex.work.back());
    ex.work.pop_back();
    if (++work > kMaxStepWork) return false;
    while (!s.empty() && elements_[std::size_t(s.back())].kind == Kind::end) s.pop_back();
    if (s.empty() || elements_[std::size_t(s.back())].kind == Kind::bytes) {
      out.push_back(std::move(s));
      if (out.size() > kMaxStacks) return false;
      continue;
    }
    // A reference: its continuation stays (unless it is the alternative's end: a tail call),
    // then one stack per alternative of the referenced rule.
    const std::int32_t pos = s.back();
    const auto& alts = rules_[std::size_t(elements_[std::size_t(pos)].value)].alts;
    s.back() = pos + 1;
    if (elements_[std::size_t(pos + 1)].kind == Kind::end) s.pop_back();
    for (std::size_t i = 0; i < alts.size(); ++i) {
      Stack c = (i + 1 == alts.size()) ? std::move(s) : s;
      c.push_back(alts[i]);
      if (alts.size() > 1 && work > Expansion::kDedupeAfter && !ex.seen.insert(c).second) continue;  // walked once
      ex.work.push_back(std::move(c));
    }
  }
  return true;
}

bool Grammar::step(const StackSet& in, unsigned char b, StackSet& out) const {
  out.clear();
  Expansion& ex = scratch_expansion();
  ex.clear();
  for (const Stack& s : in) {
    if (s.empty() || !matches(s.back(), b)) continue;
    Stack c = s;
    c.back() += 1;
    ex.work.push_back(std::move(c));
  }
  if (!expand(ex, out)) {
    out.clear();
    return false;
  }
  normalize(out);
  return true;
}

bool Grammar::advance(StackSet& set, std::string_view bytes, bool* overflow) const {
  if (overflow) *overflow = false;
  StackSet next;
  for (char ch : bytes) {
    if (!step(set, static_cast<unsigned char>(ch), next)) {
      if (overflow) *overflow = true;
      set.clear();
      return false;
    }
    set.swap(next);
    if (set.empty()) return false;
  }
  return true;
}

namespace {

Grammar::Expansion& scratch_expansion() {
  thread_local Grammar::Expansion ex;
  return ex;
}

}  // namespace

void Grammar::normalize(StackSet& set) {
  if (set.size() < 2) return;
  std::sort(set.begin(), set.end());
  set.erase(std::unique(set.begin(), set.end()), set.end());
}

bool Grammar::has_empty(const StackSet& set) {
  // Sorted: an empty stack sorts first.
  return !set.empty() && set.front().empty();
}

std::shared_ptr<MaskCache> Grammar::cache_for(const std::shared_ptr<const TokenIndex>& index) const {
  std::lock_guard lock(cache_mutex_);
  std::erase_if(caches_, [](const auto& c) { return c.first.expired(); });
  for (const auto& [weak, cache] : caches_) {
    if (weak.lock() == index) return cache;
  }
  auto cache = std::make_shared<MaskCache>(*this, *index);
  caches_.emplace_back(index, cache);
  return cache;
}

bool Grammar::has_live(const StackSet& set) { return !set.empty() && !set.back().empty(); }

}  // namespace waste::grammar

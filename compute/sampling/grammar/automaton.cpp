#include "compute/sampling/grammar/automaton.hpp"

#include <algorithm>

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

StackSet Grammar::initial() const {
  StackSet out;
  for (std::int32_t a : rules_[std::size_t(root_)].alts) expand(Stack{a}, out, 0);
  normalize(out);
  return out;
}

void Grammar::expand(Stack s, StackSet& out, int depth) const {
  // Left recursion is refused at build time, so this terminates; the depth cap only guards
  // against a nesting far beyond any real document.
  if (depth > 4096) return;
  while (!s.empty()) {
    const std::int32_t pos = s.back();
    const Element& e = elements_[std::size_t(pos)];
    if (e.kind == Kind::end) {
      s.pop_back();
      continue;
    }
    if (e.kind == Kind::bytes) break;
    // A reference: its continuation stays (unless it is the alternative's end: a tail call),
    // then one stack per alternative of the referenced rule.
    s.back() = pos + 1;
    if (elements_[std::size_t(pos + 1)].kind == Kind::end) s.pop_back();
    const auto& alts = rules_[std::size_t(e.value)].alts;
    for (std::size_t i = 0; i < alts.size(); ++i) {
      Stack c = (i + 1 == alts.size()) ? std::move(s) : s;
      c.push_back(alts[i]);
      expand(std::move(c), out, depth + 1);
    }
    return;
  }
  out.push_back(std::move(s));
}

void Grammar::step_stack(const Stack& s, unsigned char b, StackSet& out) const {
  if (s.empty() || !matches(s.back(), b)) return;
  Stack c = s;
  c.back() += 1;
  expand(std::move(c), out, 0);
}

void Grammar::step(const StackSet& in, unsigned char b, StackSet& out) const {
  out.clear();
  for (const Stack& s : in) step_stack(s, b, out);
  normalize(out);
}

bool Grammar::advance(StackSet& set, std::string_view bytes) const {
  StackSet next;
  for (char ch : bytes) {
    step(set, static_cast<unsigned char>(ch), next);
    set.swap(next);
    if (set.empty()) return false;
  }
  return true;
}

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

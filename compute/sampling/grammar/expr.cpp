// GrammarBuilder: lowers the expression IR into the flat automaton and checks it.
#include "compute/sampling/grammar/expr.hpp"

#include <map>

#include "compute/sampling/grammar/automaton.hpp"

namespace waste::grammar {

Expr Expr::byte_set(const ByteSet& s) {
  Expr e;
  e.kind = Kind::bytes;
  e.set = s;
  return e;
}
Expr Expr::byte(unsigned char b) {
  ByteSet s;
  s.set(b);
  return byte_set(s);
}
Expr Expr::byte_range(unsigned char lo, unsigned char hi) {
  ByteSet s;
  for (unsigned c = lo; c <= hi; ++c) s.set(c);
  return byte_set(s);
}
Expr Expr::literal(std::string_view bytes) {
  std::vector<Expr> kids;
  kids.reserve(bytes.size());
  for (char c : bytes) kids.push_back(byte(static_cast<unsigned char>(c)));
  return seq(std::move(kids));
}
Expr Expr::seq(std::vector<Expr> kids) {
  if (kids.size() == 1) return std::move(kids[0]);
  Expr e;
  e.kind = Kind::seq;
  e.kids = std::move(kids);
  return e;
}
Expr Expr::alt(std::vector<Expr> kids) {
  if (kids.size() == 1) return std::move(kids[0]);
  Expr e;
  e.kind = Kind::alt;
  e.kids = std::move(kids);
  return e;
}
Expr Expr::ref(int rule) {
  Expr e;
  e.kind = Kind::ref;
  e.rule = rule;
  return e;
}
Expr Expr::repeat(Expr kid, int min, int max) {
  if (min == 1 && max == 1) return kid;
  Expr e;
  e.kind = Kind::repeat;
  e.min = min;
  e.max = max;
  e.kids.push_back(std::move(kid));
  return e;
}

int GrammarBuilder::declare(std::string name) {
  const int id = int(names_.size());
  by_name_.emplace(name, id);
  names_.push_back(std::move(name));
  bodies_.emplace_back();
  return id;
}
void GrammarBuilder::define(int rule, Expr body) { bodies_[std::size_t(rule)] = std::move(body); }
int GrammarBuilder::add(std::string name, Expr body) {
  const int id = declare(std::move(name));
  define(id, std::move(body));
  return id;
}
std::optional<int> GrammarBuilder::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

namespace {

// Beyond this the grammar is refused: each element may cost a token-set precomputation.
constexpr std::size_t kMaxElements = 1u << 21;

class Lowering {
 public:
  Lowering(const GrammarBuilder& b, const CompileLimits& limits, std::chrono::steady_clock::time_point started)
      : b_(b), limits_(limits), started_(started) {}

  Result<std::shared_ptr<const Grammar>> run(int root) {
    for (int r = 0; r < b_.size(); ++r) {
      if (!b_.defined(r)) return make_error(Errc::format, "rule '" + b_.name(r) + "' is referenced but not defined");
      rules_.push_back(Grammar::Rule{b_.name(r), {}});
    }
    for (int r = 0; r < b_.size(); ++r) pending_.emplace_back(r, b_.body(r));
    // Helper rules are appended while lowering, so index, not iterate.
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      const int rule = pending_[i].first;
      Expr body = std::move(pending_[i].second);
      if (body.kind == Expr::Kind::alt) {
        for (const Expr& a : body.kids) alternative(rule, a);
      } else {
        alternative(rule, body);
      }
      if (elements_.size() > kMaxElements) {
        return make_error(Errc::unsupported, "grammar too large (over " + std::to_string(kMaxElements) +
                                                 " elements; a length or count bound is too big)");
      }
      if (i % 1024 == 0) WASTE_TRY(check_compile_time(limits_, started_));
    }
    WASTE_TRY(check_left_recursion());
    WASTE_TRY(check_expansion());
    WASTE_TRY(check_compile_time(limits_, started_));
    std::vector<std::array<std::uint64_t, 4>> sets(set_list_.size());
    for (std::size_t i = 0; i < set_list_.size(); ++i) {
      for (unsigned c = 0; c < 256; ++c) {
        if (set_list_[i].test(c)) sets[i][c >> 6] |= std::uint64_t(1) << (c & 63);
      }
    }
    return std::make_shared<const Grammar>(std::move(elements_), std::move(sets), std::move(rules_), std::move(chains_),
                                           root);
  }

 private:
  int helper(int parent, const char* what, Expr body) {
    const int id = int(rules_.size());
    rules_.push_back(Grammar::Rule{rules_[std::size_t(parent)].name + "/" + what, {}});
    pending_.emplace_back(id, std::move(body));
    return id;
  }

  void alternative(int rule, const Expr& e) {
    rules_[std::size_t(rule)].alts.push_back(std::int32_t(elements_.size()));
    emit(rule, e);
    elements_.push_back({Grammar::Kind::end, 0});
  }

  std::int32_t set_index(const ByteSet& s) {
    const std::string key = s.to_string();
    auto [it, fresh] = set_ids_.emplace(key, std::int32_t(set_list_.size()));
    if (fresh) set_list_.push_back(s);
    return it->second;
  }

  void emit(int rule, const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::bytes:
        elements_.push_back({Grammar::Kind::bytes, set_index(e.set)});
        return;
      case Expr::Kind::ref:
        elements_.push_back({Grammar::Kind::ref, e.rule});
        return;
      case Expr::Kind::seq:
        for (const Expr& k : e.kids) emit(rule, k);
        return;
      case Expr::Kind::alt:
        elements_.push_back({Grammar::Kind::ref, helper(rule, "alt", e)});
        return;
      case Expr::Kind::repeat:
        emit_repeat(rule, e);
        return;
    }
  }

  // x{min,max}: min copies, then a loop rule (unbounded) or a chain of optional rules. The
  // alternatives of x are distributed into the loop (L ::= x1 L | x2 L | ε) so a byte inside x
  // keeps the loop as its own continuation (fewer context-dependent tokens, see mask_cache).
  void emit_repeat(int rule, const Expr& e) {
    const Expr& x = e.kids[0];
    if (e.min > 0) {
      const bool simple = x.kind == Expr::Kind::bytes || x.kind == Expr::Kind::ref;
      const int once = simple ? -1 : helper(rule, "item", x);
      for (int i = 0; i < e.min; ++i) {
        if (simple) {
          emit(rule, x);
        } else {
          elements_.push_back({Grammar::Kind::ref, once});
        }
      }
    }
    if (e.max >= 0 && e.max <= e.min) return;
    auto loop_body = [&](int self) {
      std::vector<Expr> alts;
      const std::vector<Expr> items = x.kind == Expr::Kind::alt ? x.kids : std::vector<Expr>{x};
      for (const Expr& item : items) alts.push_back(Expr::seq({item, Expr::ref(self)}));
      alts.push_back(Expr::empty());
      return Expr::alt(std::move(alts));
    };
    if (e.max < 0) {
      const int id = int(rules_.size());
      rules_.push_back(Grammar::Rule{rules_[std::size_t(rule)].name + "/star", {}});
      pending_.emplace_back(id, loop_body(id));
      elements_.push_back({Grammar::Kind::ref, id});
      return;
    }
    // O1 ::= x | ε; Oj ::= x O(j-1) | ε. Every Oj (j > 1) has the same layout: a chain.
    const auto chain = std::int32_t(chains_.size());
    chains_.emplace_back();
    int prev = -1;
    for (int j = 1; j <= e.max - e.min; ++j) {
      std::vector<Expr> alts;
      const std::vector<Expr> items = x.kind == Expr::Kind::alt ? x.kids : std::vector<Expr>{x};
      for (const Expr& item : items) alts.push_back(prev < 0 ? item : Expr::seq({item, Expr::ref(prev)}));
      alts.push_back(Expr::empty());
      const int id = int(rules_.size());
      rules_.push_back(Grammar::Rule{rules_[std::size_t(rule)].name + "/opt", {}, chain, j});
      chains_.back().push_back(id);
      pending_.emplace_back(id, Expr::alt(std::move(alts)));
      prev = id;
      if (rules_.size() > kMaxElements) break;
    }
    elements_.push_back({Grammar::Kind::ref, prev});
  }

  Status check_left_recursion() {
    const std::size_t n = rules_.size();
    std::vector<char> nullable(n, 0);
    auto alt_nullable = [&](std::int32_t pos) {
      for (;; ++pos) {
        const auto& el = elements_[std::size_t(pos)];
        if (el.kind == Grammar::Kind::end) return true;
        if (el.kind == Grammar::Kind::bytes || !nullable[std::size_t(el.value)]) return false;
      }
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (std::int32_t a : rules_[r].alts) {
          if (alt_nullable(a)) {
            nullable[r] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    // Edges r -> s where s can be reached from r without consuming a byte.
    std::vector<std::vector<int>> edges(n);
    for (std::size_t r = 0; r < n; ++r) {
      for (std::int32_t pos : rules_[r].alts) {
        for (;; ++pos) {
          const auto& el = elements_[std::size_t(pos)];
          if (el.kind != Grammar::Kind::ref) break;
          edges[r].push_back(el.value);
          if (!nullable[std::size_t(el.value)]) break;
        }
      }
    }
    std::vector<char> color(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<int, std::size_t>> path;
    for (std::size_t start = 0; start < n; ++start) {
      if (color[start]) continue;
      path.emplace_back(int(start), 0);
      color[start] = 1;
      while (!path.empty()) {
        auto& [r, i] = path.back();
        if (i == edges[std::size_t(r)].size()) {
          color[std::size_t(r)] = 2;
          path.pop_back();
          continue;
        }
        const int s = edges[std::size_t(r)][i++];
        if (color[std::size_t(s)] == 1) {
          std::string name = rules_[std::size_t(s)].name;
          name = name.substr(0, name.find('/'));
          return make_error(Errc::format, "rule '" + name + "' is left-recursive (it can reach itself without "
                                                            "consuming a byte)");
        }
        if (color[std::size_t(s)] == 0) {
          color[std::size_t(s)] = 1;
          path.emplace_back(s, 0);
        }
      }
    }
    nullable_ = std::move(nullable);
    return ok();
  }

  // Counts, per rule, the derivations an expansion walks before the first byte (without the
  // de-duplication the automaton does as it goes): N = those ending at a byte set, E = those
  // deriving the empty string. A reference at p: N(R) + E(R) * N(rest), E(R) * E(rest). Refused
  // when a rule, or an alternative's rest after a byte, reaches the limit: a grammar that
  // ambiguous (e.g. 40 rules each "A_k ::= A_k-1 | A_k-1": 2^40) has no use a real schema needs.
  // Left recursion is already refused, so the references before a byte form a DAG: the rules
  // are counted in post order of that graph, iteratively (no recursion on the grammar's depth).
  Status check_expansion() const {
    const std::uint64_t cap = limits_.max_expansion + 1;
    auto add = [&](std::uint64_t a, std::uint64_t b) { return std::min(cap, a + b); };  // a, b <= cap
    auto mul = [&](std::uint64_t a, std::uint64_t b) {
      return (a == 0 || b == 0) ? 0 : (a > cap / b ? cap : std::min(cap, a * b));
    };
    const std::size_t n = rules_.size();
    std::vector<std::uint64_t> N(n, 0), E(n, 0);
    std::vector<char> done(n, 0);
    // The counts of the alternative's rest from pos; every rule referenced before its first byte is done.
    std::vector<std::int32_t> refs;
    auto rest = [&](std::int32_t pos) {
      refs.clear();
      std::pair<std::uint64_t, std::uint64_t> acc{0, 1};
      for (;; ++pos) {
        const auto& el = elements_[std::size_t(pos)];
        if (el.kind == Grammar::Kind::bytes) {
          acc = {1, 0};
          break;
        }
        if (el.kind == Grammar::Kind::end) break;
        if (!nullable_[std::size_t(el.value)]) {
          acc = {N[std::size_t(el.value)], 0};
          break;
        }
        refs.push_back(el.value);
      }
      for (std::size_t k = refs.size(); k-- > 0;) {
        const std::size_t r = std::size_t(refs[k]);
        acc = {add(N[r], mul(E[r], acc.first)), mul(E[r], acc.second)};
      }
      return acc;
    };
    auto refuse = [&](std::size_t r) {
      return make_error(Errc::unsupported, "grammar too ambiguous: a byte in rule '" + rules_[r].name +
                                               "' may be reached over " + std::to_string(limits_.max_expansion) +
                                               " ways (the expansion limit)");
    };
    // Post order over the references before a byte (edges as in check_left_recursion).
    std::vector<std::pair<std::size_t, std::size_t>> path;  // rule, index of the alternative being scanned
    for (std::size_t start = 0; start < n; ++start) {
      if (done[start]) continue;
      path.emplace_back(start, 0);
      while (!path.empty()) {
        auto& [r, i] = path.back();
        const auto& alts = rules_[r].alts;
        if (i < alts.size()) {
          std::size_t child = n;  // a rule this alternative starts with that is not counted yet
          for (std::int32_t pos = alts[i];; ++pos) {
            const auto& el = elements_[std::size_t(pos)];
            if (el.kind != Grammar::Kind::ref) break;
            if (!done[std::size_t(el.value)]) {
              child = std::size_t(el.value);
              break;
            }
            if (!nullable_[std::size_t(el.value)]) break;
          }
          if (child < n) {
            path.emplace_back(child, 0);
          } else {
            ++i;
          }
          continue;
        }
        std::uint64_t nr = 0, er = 0;
        for (std::int32_t pos : alts) {
          const auto [a, b] = rest(pos);
          nr = add(nr, a);
          er = add(er, b);
        }
        const std::size_t rule = r;
        N[rule] = nr, E[rule] = er;
        done[rule] = 1;
        path.pop_back();
        if (add(nr, er) >= cap) return refuse(rule);
      }
    }
    // The rest of an alternative after each of its byte sets (where a step's expansion starts).
    for (std::size_t r = 0; r < n; ++r) {
      for (std::int32_t pos : rules_[r].alts) {
        for (;; ++pos) {
          const auto& el = elements_[std::size_t(pos)];
          if (el.kind == Grammar::Kind::end) break;
          if (el.kind != Grammar::Kind::bytes || elements_[std::size_t(pos) + 1].kind != Grammar::Kind::ref) continue;
          const auto [a, b] = rest(pos + 1);
          if (add(a, b) >= cap) return refuse(r);
        }
      }
    }
    return ok();
  }

  const GrammarBuilder& b_;
  const CompileLimits& limits_;
  std::chrono::steady_clock::time_point started_;
  std::vector<char> nullable_;  // per rule, from check_left_recursion
  std::vector<Grammar::Element> elements_;
  std::vector<Grammar::Rule> rules_;
  std::vector<std::pair<int, Expr>> pending_;
  std::vector<std::vector<std::int32_t>> chains_;
  std::map<std::string, std::int32_t> set_ids_;
  std::vector<ByteSet> set_list_;
};

}  // namespace

Status check_compile_time(const CompileLimits& limits, std::chrono::steady_clock::time_point started) {
  if (std::chrono::steady_clock::now() - started <= limits.max_time) return ok();
  return make_error(Errc::unsupported, "grammar compilation ran over " + std::to_string(limits.max_time.count()) +
                                           " ms (the time limit)");
}

Result<std::shared_ptr<const Grammar>> GrammarBuilder::build(int root, const CompileLimits& limits,
                                                             std::chrono::steady_clock::time_point started) const {
  auto grammar = Lowering(*this, limits, started).run(root);
  if (!grammar) return grammar;
  bool overflow = false;
  (void)(*grammar)->initial(&overflow);
  if (overflow) {
    return make_error(Errc::unsupported, "grammar too ambiguous: its first byte expands past " +
                                             std::to_string(Grammar::kMaxStacks) + " stacks (the expansion limit)");
  }
  return grammar;
}

}  // namespace waste::grammar

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
  explicit Lowering(const GrammarBuilder& b) : b_(b) {}

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
    }
    WASTE_TRY(check_left_recursion());
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

  Status check_left_recursion() const {
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
    return ok();
  }

  const GrammarBuilder& b_;
  std::vector<Grammar::Element> elements_;
  std::vector<Grammar::Rule> rules_;
  std::vector<std::pair<int, Expr>> pending_;
  std::vector<std::vector<std::int32_t>> chains_;
  std::map<std::string, std::int32_t> set_ids_;
  std::vector<ByteSet> set_list_;
};

}  // namespace

Result<std::shared_ptr<const Grammar>> GrammarBuilder::build(int root) const { return Lowering(*this).run(root); }

}  // namespace waste::grammar

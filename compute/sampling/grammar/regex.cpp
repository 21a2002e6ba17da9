#include "compute/sampling/grammar/regex.hpp"

#include <cctype>

namespace waste::grammar {
namespace {

// Groups nest in the parser's recursion (and in the expression it builds): bounded.
constexpr int kMaxGroupDepth = 64;

class RegexParser {
 public:
  RegexParser(std::string_view p, const CharClass& allowed) : p_(p), allowed_(allowed) {}

  Result<Expr> parse() {
    bool anchored_start = false, anchored_end = false;
    if (!p_.empty() && p_[0] == '^') {
      anchored_start = true;
      i_ = 1;
    }
    std::string_view body = p_;
    if (body.size() > i_ && body.back() == '$' && !escaped_at(body.size() - 1)) {
      anchored_end = true;
      end_ = body.size() - 1;
    } else {
      end_ = body.size();
    }
    auto e = alternation();
    if (!e) return e;
    if (i_ != end_) return fail(p_[i_] == ')' ? "unbalanced ')'" : "unexpected character");
    std::vector<Expr> parts;
    const Expr any_star = Expr::repeat(dot(), 0, -1);
    if (!anchored_start) parts.push_back(any_star);
    parts.push_back(std::move(*e));
    if (!anchored_end) parts.push_back(any_star);
    return Expr::seq(std::move(parts));
  }

 private:
  bool escaped_at(std::size_t pos) const {
    std::size_t n = 0;
    while (pos > n && p_[pos - n - 1] == '\\') ++n;
    return n % 2 == 1;
  }

  std::unexpected<Error> fail(const std::string& what) const {
    // A long pattern is shown by its start (a refusal does not echo a whole hostile body).
    const std::string shown = p_.size() <= 80 ? std::string(p_) : std::string(p_.substr(0, 80)) + "...";
    return make_error(Errc::unsupported, "pattern '" + shown + "': " + what + " at offset " +
                                             std::to_string(i_) + " (see the regex subset in docs/design/grammar.md)");
  }

  bool more() const { return i_ < end_; }

  Expr dot() const { return CharClass::any().minus(newline()).minus(excluded()).to_expr(); }
  static CharClass newline() {
    CharClass c;
    c.add('\n', '\n');
    return c;
  }
  CharClass excluded() const { return CharClass::any().minus(allowed_); }
  Expr of(const CharClass& c) const { return c.minus(excluded()).to_expr(); }

  Result<Expr> alternation() {
    std::vector<Expr> alts;
    for (;;) {
      auto s = sequence();
      if (!s) return s;
      alts.push_back(std::move(*s));
      if (more() && p_[i_] == '|') {
        ++i_;
        continue;
      }
      return Expr::alt(std::move(alts));
    }
  }

  Result<Expr> sequence() {
    std::vector<Expr> items;
    while (more() && p_[i_] != '|' && p_[i_] != ')') {
      auto a = atom();
      if (!a) return a;
      auto q = quantified(std::move(*a));
      if (!q) return q;
      items.push_back(std::move(*q));
    }
    return Expr::seq(std::move(items));
  }

  Result<Expr> quantified(Expr a) {
    while (more()) {
      const char c = p_[i_];
      int min = 0, max = 0;
      if (c == '*') {
        min = 0, max = -1, ++i_;
      } else if (c == '+') {
        min = 1, max = -1, ++i_;
      } else if (c == '?') {
        min = 0, max = 1, ++i_;
      } else if (c == '{') {
        auto r = braces(min, max);
        if (!r) return std::unexpected(r.error());
      } else {
        break;
      }
      if (more() && p_[i_] == '?') ++i_;  // lazy: same language
      if (more() && (p_[i_] == '+')) return fail("possessive quantifiers are not supported");
      a = Expr::repeat(std::move(a), min, max);
      // x** or x{2}{3}: refused (Python and JavaScript refuse them too); a group repeats a repeat.
      if (more() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?' || p_[i_] == '{')) {
        return fail("a quantifier after a quantifier (use a group)");
      }
    }
    return a;
  }

  Status braces(int& min, int& max) {
    ++i_;
    auto number = [&](int& out) {
      const std::size_t start = i_;
      long v = 0;
      while (more() && p_[i_] >= '0' && p_[i_] <= '9') {
        v = v * 10 + (p_[i_] - '0');
        if (v > 10000) return false;
        ++i_;
      }
      out = int(v);
      return i_ > start;
    };
    if (!number(min)) return fail("a '{' quantifier needs a count (at most 10000)");
    max = min;
    if (more() && p_[i_] == ',') {
      ++i_;
      if (more() && p_[i_] == '}') {
        max = -1;
      } else if (!number(max) || max < min) {
        return fail("bad '{n,m}' quantifier");
      }
    }
    if (!more() || p_[i_] != '}') return fail("unterminated '{' quantifier");
    ++i_;
    return ok();
  }

  Result<Expr> atom() {
    const char c = p_[i_];
    if (c == '(') {
      if (++groups_ > kMaxGroupDepth) return fail("groups nested deeper than " + std::to_string(kMaxGroupDepth));
      ++i_;
      if (more() && p_[i_] == '?') {
        if (i_ + 1 < end_ && p_[i_ + 1] == ':') {
          i_ += 2;
        } else {
          return fail("only the (?: ) group form is supported");
        }
      }
      auto e = alternation();
      if (!e) return e;
      if (!more() || p_[i_] != ')') return fail("unterminated group");
      ++i_;
      --groups_;
      return e;
    }
    if (c == '.') {
      ++i_;
      return dot();
    }
    if (c == '[') return bracket();
    if (c == '^' || c == '$') return fail("anchors are only supported first ('^') and last ('$')");
    if (c == '*' || c == '+' || c == '?' || c == '{') return fail("nothing to repeat");
    if (c == '\\') {
      CharClass cls;
      auto r = escape(cls, false);
      if (!r) return std::unexpected(r.error());
      return of(cls);
    }
    std::uint32_t cp = 0;
    if (!utf8_decode(p_, i_, cp)) return fail("malformed UTF-8");
    CharClass one;
    one.add(cp, cp);
    return of(one);
  }

  static CharClass digits() {
    CharClass c;
    c.add('0', '9');
    return c;
  }
  static CharClass word() {
    CharClass c;
    c.add('0', '9'), c.add('A', 'Z'), c.add('a', 'z'), c.add('_', '_');
    return c;
  }
  static CharClass space() {
    CharClass c;
    c.add(' ', ' '), c.add('\t', '\r');
    return c;
  }
  // Python's \D \W \S also exclude the Unicode digits/letters/spaces, so the negated forms
  // produce printable ASCII only (a subset of what they match).
  static CharClass ascii_not(const CharClass& c) {
    CharClass ascii;
    ascii.add(0x20, 0x7E);
    return ascii.minus(c);
  }

  // After a '\': one code point or a shorthand class, added to cls.
  Status escape(CharClass& cls, bool in_bracket) {
    ++i_;
    if (!more()) return fail("trailing '\\'");
    const char c = p_[i_++];
    switch (c) {
      case 'd': cls.add(digits()); return ok();
      case 'w': cls.add(word()); return ok();
      case 's': cls.add(space()); return ok();
      case 'D': cls.add(ascii_not(digits())); return ok();
      case 'W': cls.add(ascii_not(word())); return ok();
      case 'S': cls.add(ascii_not(space())); return ok();
      case 'n': cls.add('\n', '\n'); return ok();
      case 't': cls.add('\t', '\t'); return ok();
      case 'r': cls.add('\r', '\r'); return ok();
      case 'f': cls.add('\f', '\f'); return ok();
      case 'v': cls.add('\v', '\v'); return ok();
      case 'x':
      case 'u': {
        const int n = c == 'x' ? 2 : 4;
        std::uint32_t v = 0;
        for (int k = 0; k < n; ++k) {
          if (!more() || !std::isxdigit(static_cast<unsigned char>(p_[i_]))) return fail("bad \\x or \\u escape");
          const char h = p_[i_++];
          v = v * 16 + std::uint32_t(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        cls.add(v, v);
        return ok();
      }
      case 'b':
        if (in_bracket) {
          cls.add('\b', '\b');
          return ok();
        }
        [[fallthrough]];
      default:
        if (std::isalnum(static_cast<unsigned char>(c))) {
          --i_;
          return fail(std::string("escape '\\") + c + "' is not supported");
        }
        cls.add(static_cast<unsigned char>(c), static_cast<unsigned char>(c));
        return ok();
    }
  }

  Result<Expr> bracket() {
    ++i_;
    bool negate = false;
    if (more() && p_[i_] == '^') {
      negate = true;
      ++i_;
    }
    CharClass cls;
    bool first = true;
    for (;;) {
      if (!more()) return fail("unterminated '['");
      if (p_[i_] == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      std::uint32_t lo = 0;
      bool single = true;
      if (p_[i_] == '\\') {
        CharClass e;
        auto r = escape(e, true);
        if (!r) return std::unexpected(r.error());
        if (e.ranges().size() == 1 && e.ranges()[0].first == e.ranges()[0].second) {
          lo = e.ranges()[0].first;
        } else {
          cls.add(e);
          single = false;
        }
      } else if (p_[i_] == '[' && i_ + 1 < end_ && p_[i_ + 1] == ':') {
        return fail("POSIX classes [: :] are not supported");
      } else if (!utf8_decode(p_, i_, lo)) {
        return fail("malformed UTF-8");
      }
      if (!single) continue;
      if (i_ + 1 < end_ && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        std::uint32_t hi = 0;
        if (p_[i_] == '\\') {
          CharClass e;
          auto r = escape(e, true);
          if (!r) return std::unexpected(r.error());
          if (e.ranges().size() != 1 || e.ranges()[0].first != e.ranges()[0].second) return fail("bad class range");
          hi = e.ranges()[0].first;
        } else if (!utf8_decode(p_, i_, hi)) {
          return fail("malformed UTF-8");
        }
        if (hi < lo) return fail("class range out of order");
        cls.add(lo, hi);
      } else {
        cls.add(lo, lo);
      }
    }
    if (negate) {
      // Python's [^..] matches any character outside the set, Unicode included.
      cls = cls.complement();
    }
    return of(cls);
  }

  std::string_view p_;
  const CharClass& allowed_;
  std::size_t i_ = 0;
  std::size_t end_ = 0;
  int groups_ = 0;  // open groups
};

}  // namespace

Result<Expr> compile_regex(std::string_view pattern, const CharClass& allowed) {
  return RegexParser(pattern, allowed).parse();
}

}  // namespace waste::grammar

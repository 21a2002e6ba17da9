// The GBNF-like grammar file (docs/design/grammar.md): `name ::= alternatives`, a rule running
// until the next `name ::=`; literals "..", classes [..] / [^..], '.', groups ( ), '|', postfix
// * + ? {n} {n,} {n,m}; '#' comments. Start rule: root. Errors name line and column.
#include <cctype>
#include <map>

#include "compute/sampling/grammar/automaton.hpp"
#include "compute/sampling/grammar/charclass.hpp"
#include "compute/sampling/grammar/grammar.hpp"

namespace waste::grammar {
namespace {

class EbnfParser {
 public:
  EbnfParser(std::string_view text, const CompileLimits& limits) : t_(text), limits_(limits) {}

  Result<std::shared_ptr<const Grammar>> run() {
    skip();
    if (at_end()) return fail("the grammar is empty (it needs a rule named 'root')");
    while (!at_end()) {
      const std::size_t name_at = i_;
      const std::string name = identifier();
      if (name.empty()) return fail("expected a rule name");
      skip();
      if (t_.substr(i_, 3) != "::=") return fail("expected '::=' after rule name '" + name + "'");
      i_ += 3;
      const int id = rule_id(name, name_at);
      if (defined_.contains(id)) return fail_at(name_at, "rule '" + name + "' is defined twice");
      defined_.emplace(id, name_at);
      auto body = alternatives(0);
      if (!body) return std::unexpected(body.error());
      b_.define(id, std::move(*body));
    }
    for (const auto& [id, at] : first_use_) {
      if (!defined_.contains(id)) return fail_at(at, "undefined rule '" + b_.name(id) + "'");
    }
    auto root = b_.find("root");
    if (!root || !defined_.contains(*root)) return make_error(Errc::format, "grammar: no rule named 'root'");
    auto g = b_.build(*root, limits_);
    if (!g) {
      // Name the line of the rule the error is about.
      std::string msg = g.error().message;
      const auto q = msg.find('\'');
      if (q != std::string::npos) {
        const auto q2 = msg.find('\'', q + 1);
        if (auto r = b_.find(msg.substr(q + 1, q2 - q - 1)); r && defined_.contains(*r)) {
          return fail_at(defined_[*r], msg);
        }
      }
      return make_error(g.error().code, "grammar: " + msg);
    }
    return g;
  }

 private:
  bool at_end() const { return i_ >= t_.size(); }

  std::unexpected<Error> fail_at(std::size_t at, const std::string& what) const {
    std::size_t line = 1, col = 1;
    for (std::size_t k = 0; k < at && k < t_.size(); ++k) {
      if (t_[k] == '\n') {
        ++line, col = 1;
      } else {
        ++col;
      }
    }
    return make_error(Errc::format, "grammar line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what);
  }
  std::unexpected<Error> fail(const std::string& what) const { return fail_at(i_, what); }

  void skip() {
    while (!at_end()) {
      const char c = t_[i_];
      if (c == '#') {
        while (!at_end() && t_[i_] != '\n') ++i_;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++i_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }

  std::string identifier() {
    const std::size_t start = i_;
    while (!at_end() && name_char(t_[i_])) ++i_;
    return std::string(t_.substr(start, i_ - start));
  }

  int rule_id(const std::string& name, std::size_t at) {
    if (auto r = b_.find(name)) return *r;
    const int id = b_.declare(name);
    first_use_.emplace(id, at);
    return id;
  }

  // Is the text at i_ the start of the next rule (`name ::=`)?
  bool next_rule() const {
    std::size_t k = i_;
    while (k < t_.size() && name_char(t_[k])) ++k;
    if (k == i_) return false;
    while (k < t_.size() && (t_[k] == ' ' || t_[k] == '\t' || t_[k] == '\r' || t_[k] == '\n')) ++k;
    return t_.substr(k, 3) == "::=";
  }

  Result<Expr> alternatives(int depth) {
    std::vector<Expr> alts;
    for (;;) {
      auto s = sequence(depth);
      if (!s) return s;
      alts.push_back(std::move(*s));
      skip();
      if (!at_end() && t_[i_] == '|') {
        ++i_;
        continue;
      }
      return Expr::alt(std::move(alts));
    }
  }

  Result<Expr> sequence(int depth) {
    std::vector<Expr> items;
    for (;;) {
      skip();
      if (at_end()) break;
      const char c = t_[i_];
      if (c == '|' || c == ')') break;
      if (depth == 0 && next_rule()) break;
      auto p = primary(depth);
      if (!p) return p;
      auto q = postfix(std::move(*p));
      if (!q) return q;
      items.push_back(std::move(*q));
    }
    if (!at_end() && t_[i_] == ')' && depth == 0) return fail("unbalanced ')'");
    return Expr::seq(std::move(items));
  }

  Result<Expr> postfix(Expr e) {
    for (;;) {
      if (at_end()) return e;
      const char c = t_[i_];
      if (c == '*') {
        ++i_, e = Expr::repeat(std::move(e), 0, -1);
      } else if (c == '+') {
        ++i_, e = Expr::repeat(std::move(e), 1, -1);
      } else if (c == '?') {
        ++i_, e = Expr::repeat(std::move(e), 0, 1);
      } else if (c == '{') {
        const std::size_t at = i_++;
        auto num = [&](int& out) {
          skip();
          const std::size_t s = i_;
          long v = 0;
          while (!at_end() && std::isdigit(static_cast<unsigned char>(t_[i_]))) {
            v = v * 10 + (t_[i_++] - '0');
            if (v > 10000) return false;
          }
          out = int(v);
          skip();
          return i_ > s;
        };
        int min = 0, max = 0;
        if (!num(min)) return fail_at(at, "a '{' repetition needs a count (at most 10000)");
        max = min;
        if (!at_end() && t_[i_] == ',') {
          ++i_;
          skip();
          if (!at_end() && t_[i_] == '}') {
            max = -1;
          } else if (!num(max) || max < min) {
            return fail_at(at, "bad '{n,m}' repetition");
          }
        }
        if (at_end() || t_[i_] != '}') return fail_at(at, "unterminated '{' repetition");
        ++i_;
        e = Expr::repeat(std::move(e), min, max);
      } else {
        return e;
      }
    }
  }

  // One character of a literal or class (after escapes); false at a malformed one.
  Result<std::uint32_t> character() {
    if (at_end()) return fail("unexpected end of the grammar");
    if (t_[i_] != '\\') {
      std::uint32_t cp = 0;
      if (!utf8_decode(t_, i_, cp)) return fail("malformed UTF-8");
      return cp;
    }
    const std::size_t at = i_++;
    if (at_end()) return fail_at(at, "trailing '\\'");
    const char c = t_[i_++];
    switch (c) {
      case 'n': return std::uint32_t('\n');
      case 'r': return std::uint32_t('\r');
      case 't': return std::uint32_t('\t');
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': return std::uint32_t(c);
      case 'x': case 'u': case 'U': {
        const int n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        std::uint32_t v = 0;
        for (int k = 0; k < n; ++k) {
          if (at_end() || !std::isxdigit(static_cast<unsigned char>(t_[i_]))) return fail_at(at, "bad '\\" + std::string(1, c) + "' escape");
          const char h = t_[i_++];
          v = v * 16 + std::uint32_t(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return fail_at(at, "escape is not a Unicode scalar value");
        return v;
      }
      default:
        return fail_at(at, "unknown escape '\\" + std::string(1, c) + "'");
    }
  }

  Result<Expr> primary(int depth) {
    const char c = t_[i_];
    if (c == '"') {
      const std::size_t at = i_++;
      std::string bytes;
      for (;;) {
        if (at_end() || t_[i_] == '\n') return fail_at(at, "unterminated string literal");
        if (t_[i_] == '"') {
          ++i_;
          break;
        }
        // \xHH in a literal is one raw byte (any byte may be spelled); other escapes are characters.
        if (t_[i_] == '\\' && i_ + 1 < t_.size() && t_[i_ + 1] == 'x') {
          auto cp = character();
          if (!cp) return std::unexpected(cp.error());
          bytes += char(*cp);
          continue;
        }
        auto cp = character();
        if (!cp) return std::unexpected(cp.error());
        bytes += utf8_encode(*cp);
      }
      return Expr::literal(bytes);
    }
    if (c == '[') {
      const std::size_t at = i_++;
      bool negate = false;
      if (!at_end() && t_[i_] == '^') negate = true, ++i_;
      CharClass cls;
      for (;;) {
        if (at_end() || t_[i_] == '\n') return fail_at(at, "unterminated character class");
        if (t_[i_] == ']') {
          ++i_;
          break;
        }
        auto lo = character();
        if (!lo) return std::unexpected(lo.error());
        std::uint32_t hi = *lo;
        if (i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
          ++i_;
          if (t_[i_] == '\n') return fail_at(at, "unterminated character class");
          auto h = character();
          if (!h) return std::unexpected(h.error());
          hi = *h;
          if (hi < *lo) return fail_at(at, "character range out of order");
        }
        cls.add(*lo, hi);
      }
      return (negate ? cls.complement() : cls).to_expr();
    }
    if (c == '.') {
      ++i_;
      return CharClass::any().to_expr();
    }
    if (c == '(') {
      const std::size_t at = i_++;
      if (depth + 1 > limits_.max_depth) {
        return fail_at(at, "groups nested deeper than " + std::to_string(limits_.max_depth));
      }
      auto e = alternatives(depth + 1);
      if (!e) return e;
      skip();
      if (at_end() || t_[i_] != ')') return fail_at(at, "unclosed '('");
      ++i_;
      return e;
    }
    if (name_char(c)) {
      const std::size_t at = i_;
      const std::string name = identifier();
      return Expr::ref(rule_id(name, at));
    }
    return fail(std::string("unexpected character '") + c + "'");
  }

  std::string_view t_;
  const CompileLimits& limits_;
  std::size_t i_ = 0;
  GrammarBuilder b_;
  std::map<int, std::size_t> defined_;    // rule -> offset of its definition
  std::map<int, std::size_t> first_use_;  // rule -> offset of its first mention
};

}  // namespace

Result<std::shared_ptr<const Grammar>> compile_ebnf(std::string_view text, const CompileLimits& limits) {
  return EbnfParser(text, limits).run();
}

}  // namespace waste::grammar

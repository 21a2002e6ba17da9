#include "compute/sampling/grammar/charclass.hpp"

#include <algorithm>

namespace waste::grammar {

void CharClass::add(std::uint32_t lo, std::uint32_t hi) {
  if (lo > hi) return;
  ranges_.emplace_back(lo, hi);
  normalize();
}

void CharClass::add(const CharClass& other) {
  ranges_.insert(ranges_.end(), other.ranges_.begin(), other.ranges_.end());
  normalize();
}

void CharClass::normalize() {
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
  for (const auto& r : ranges_) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  ranges_ = std::move(out);
}

CharClass CharClass::any() {
  CharClass c;
  c.ranges_ = {{0, 0xD7FF}, {0xE000, 0x10FFFF}};
  return c;
}

CharClass CharClass::minus(const CharClass& other) const {
  CharClass out;
  for (auto [lo, hi] : ranges_) {
    std::uint32_t cur = lo;
    for (auto [olo, ohi] : other.ranges_) {
      if (ohi < cur || olo > hi) continue;
      if (olo > cur) out.ranges_.emplace_back(cur, olo - 1);
      if (ohi >= hi) {
        cur = hi + 1;
        break;
      }
      cur = ohi + 1;
    }
    if (cur <= hi) out.ranges_.emplace_back(cur, hi);
  }
  out.normalize();
  return out;
}

CharClass CharClass::complement() const { return any().minus(*this); }

std::string utf8_encode(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

bool utf8_decode(std::string_view s, std::size_t& i, std::uint32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + std::size_t(n) > s.size()) return false;
  cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + std::size_t(k)]);
    if ((b >> 6) != 2) return false;
    cp = (cp << 6) | (b & 0x3F);
  }
  i += std::size_t(n);
  return true;
}

namespace {

int utf8_len(std::uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// Splits [lo, hi] until every byte position ranges independently (the classic utf8-ranges
// construction), then appends one sequence of byte ranges per piece.
void split(std::uint32_t lo, std::uint32_t hi, std::vector<Expr>& out) {
  for (std::uint32_t m : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= m && m < hi) {
      split(lo, m, out);
      split(m + 1, hi, out);
      return;
    }
  }
  const int n = utf8_len(lo);
  for (int i = 1; i < n; ++i) {
    const std::uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = utf8_encode(lo), b = utf8_encode(hi);
  std::vector<Expr> seq;
  for (std::size_t k = 0; k < a.size(); ++k) {
    seq.push_back(Expr::byte_range(static_cast<unsigned char>(a[k]), static_cast<unsigned char>(b[k])));
  }
  out.push_back(Expr::seq(std::move(seq)));
}

}  // namespace

Expr CharClass::to_expr() const {
  std::vector<Expr> alts;
  for (auto [lo, hi] : ranges_) {
    // Surrogates are not scalar values: never emitted.
    if (lo <= 0xDFFF && hi >= 0xD800) {
      if (lo < 0xD800) split(lo, 0xD7FF, alts);
      if (hi > 0xDFFF) split(0xE000, hi, alts);
      continue;
    }
    split(lo, hi, alts);
  }
  // One byte-set for all the single-byte pieces keeps the alternatives few.
  ByteSet ascii;
  std::vector<Expr> rest;
  for (Expr& a : alts) {
    if (a.kind == Expr::Kind::bytes) {
      ascii |= a.set;
    } else {
      rest.push_back(std::move(a));
    }
  }
  std::vector<Expr> out;
  if (ascii.any()) out.push_back(Expr::byte_set(ascii));
  for (Expr& r : rest) out.push_back(std::move(r));
  if (out.empty()) return Expr::alt({});
  return Expr::alt(std::move(out));
}

}  // namespace waste::grammar

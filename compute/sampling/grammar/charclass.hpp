// Code-point classes (EBNF [..], regex classes, '.') lowered to UTF-8 byte sequences.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "compute/sampling/grammar/expr.hpp"

namespace waste::grammar {

// Closed code-point ranges.
class CharClass {
 public:
  void add(std::uint32_t lo, std::uint32_t hi);
  void add(const CharClass& other);
  // Every scalar value (0..0x10FFFF, no surrogates) not in this class.
  [[nodiscard]] CharClass complement() const;
  // This class without the code points in `other`.
  [[nodiscard]] CharClass minus(const CharClass& other) const;
  [[nodiscard]] const std::vector<std::pair<std::uint32_t, std::uint32_t>>& ranges() const { return ranges_; }
  [[nodiscard]] bool empty() const { return ranges_.empty(); }
  // One character of the class as byte sequences (an alt of seqs; an empty class matches nothing).
  [[nodiscard]] Expr to_expr() const;

  static CharClass any();  // every scalar value

 private:
  void normalize();
  std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges_;
};

std::string utf8_encode(std::uint32_t cp);
// Decodes one UTF-8 character at s[i] (advancing i); false on malformed input.
bool utf8_decode(std::string_view s, std::size_t& i, std::uint32_t& cp);

}  // namespace waste::grammar

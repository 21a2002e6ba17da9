// Special (control) tokens: loading specials.json and finding them in template markup.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/result.hpp"

namespace waste::tokenizer {

struct Special {
  int id = 0;
  std::string text;
};

// Parses specials.json: [{"id": N, "text": "..."}, ...]. Ids must be non-negative, texts non-empty,
// both unique.
Result<std::vector<Special>> parse_specials(std::string_view json_text, std::string_view origin);

struct SpecialMatch {
  std::size_t offset = 0;  // byte offset in the searched text
  std::size_t length = 0;
  int id = 0;
};

// Finds the earliest special in a text; at equal offsets the longest one wins (so "<|a|>b" and
// a special that is its prefix resolve like the reference engine's longest-first table).
class SpecialMatcher {
 public:
  SpecialMatcher() = default;
  explicit SpecialMatcher(std::vector<Special> specials);

  std::optional<SpecialMatch> find(std::string_view text, std::size_t from = 0) const noexcept;
  const std::vector<Special>& specials() const noexcept { return by_length_; }

 private:
  std::vector<Special> by_length_;  // longest first
  bool first_byte_[256] = {};       // cheap filter: can a special start with this byte?
};

}  // namespace waste::tokenizer

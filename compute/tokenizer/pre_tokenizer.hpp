// Pre-tokenization: splitting text into the pieces that BPE encodes one by one, by a tiktoken
// `pat_str` regular expression. The pattern is data, so Kimi, cl100k_base and o200k_base all load.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/result.hpp"

namespace waste::tokenizer {

// Kimi's pat_str (tokenization_kimi.py): Han runs split from other letters, case-aware words
// with English contractions, digits in groups of at most three.
inline constexpr std::string_view kKimiPattern =
    R"([\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// OpenAI's cl100k_base and o200k_base patterns, as shipped with tiktoken.
inline constexpr std::string_view kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GLM-5.3-Flash's pattern (its tokenizer.json): Kimi's without the `[\p{Han}]+` branch, so a Han
// run and the Latin run it touches are one piece (`A股` is one token there); letters \p{L}, digits
// in runs of 1..3. It is exactly OpenAI's cl100k_base pattern.
inline constexpr std::string_view kGlmPattern = kCl100kPattern;

// The pattern a container's manifest config selects: `tokenizer_han_split` (the public engine's
// key) false -> kGlmPattern; absent or true -> kKimiPattern. A non-boolean value is an error
// naming the key.
Result<std::string_view> pattern_for_config(const nlohmann::json& config);

// Splits text into pieces with the same matches as tiktoken's regex (Rust regex / fancy-regex
// semantics: leftmost-first alternation, \s = Unicode White_Space), implemented on ICU regex.
//
// Two deliberate rules for input tiktoken cannot take (it only accepts valid Unicode strings):
//  * each byte that does not start a well-formed UTF-8 sequence is a piece of its own, and the
//    well-formed runs between such bytes are matched as separate texts;
//  * text that no alternative of the pattern matches becomes a piece of its own instead of being
//    dropped (none of the shipped patterns leaves such gaps).
// Together they make decode(encode(x)) == x for any bytes.
class PreTokenizer {
 public:
  // Compiles a tiktoken pat_str; an error names the pattern position ICU rejected.
  static Result<PreTokenizer> create(std::string_view pattern);

  // Appends the pieces of `text`, in order, as views into `text`; they cover it exactly.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;
  std::vector<std::string_view> split(std::string_view text) const;

  const std::string& pattern() const noexcept { return pattern_; }

 private:
  struct Compiled;
  PreTokenizer(std::string pattern, std::shared_ptr<const Compiled> compiled);
  void split_valid(std::string_view text, std::vector<std::string_view>& pieces) const;

  std::string pattern_;
  // Shared and immutable: an ICU RegexPattern may be used by many matchers at once, so copies
  // of a tokenizer (and threads) share one compiled program.
  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace waste::tokenizer

// Pre-tokenization: splitting text into the pieces that BPE encodes one by one, by a tiktoken
// `pat_str` regular expression. The pattern is data, so Kimi, cl100k_base and o200k_base all load.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <span>
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

// DeepSeek-V4.1-Flash's pre-tokenizer (its tokenizer.json: a Sequence of three Split{Isolated}
// steps, model-families.md §2.4), as the JSON strings decode: each regex splits every piece the
// one before produced, its matches and the text between them becoming pieces. First digit runs
// of 1..3, then runs of CJK ideographs (U+4E00..U+9FA5), hiragana and katakana, then words,
// punctuation/symbol runs (\p{P}, \p{S}) and whitespace, letters taking their marks (\p{M}); no
// contraction branch. The third pattern holds a literal CR and LF, as the JSON's "\r\n" decode.
inline constexpr std::array<std::string_view, 3> kDeepSeekSplits = {
    R"(\p{N}{1,3})",
    "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};

// What a pre-tokenizer splits by: one tiktoken pat_str, or (DeepSeek-V4.1) up to four regexes
// applied in sequence as isolating splits. A non-owning view, like std::string_view: the texts
// it names must outlive it (PreTokenizer::create copies them).
class Pattern {
 public:
  static constexpr std::size_t kMaxSplits = 4;
  constexpr Pattern(std::string_view one) noexcept : splits_{one}, count_(1) {}  // NOLINT: implicit on purpose
  template <std::size_t N>
    requires(N >= 1 && N <= kMaxSplits)
  constexpr Pattern(const std::array<std::string_view, N>& splits) noexcept : count_(N) {  // NOLINT
    for (std::size_t i = 0; i < N; ++i) splits_[i] = splits[i];
  }
  constexpr std::span<const std::string_view> splits() const noexcept { return {splits_.data(), count_}; }
  friend constexpr bool operator==(const Pattern& a, const Pattern& b) noexcept {
    if (a.count_ != b.count_) return false;
    for (std::size_t i = 0; i < a.count_; ++i) {
      if (a.splits_[i] != b.splits_[i]) return false;
    }
    return true;
  }

 private:
  std::array<std::string_view, kMaxSplits> splits_{};
  std::size_t count_ = 0;
};

inline constexpr Pattern kDeepSeekPattern{kDeepSeekSplits};

// The values of the manifest config's `tokenizer_pattern` (the public engine's key, an integer):
// 0 (or absent) = one cl100k-style pattern, Kimi's or GLM's by `tokenizer_han_split`; 1 =
// DeepSeek-V4.1's three splits.
inline constexpr int kTokenizerPatternCl100k = 0;
inline constexpr int kTokenizerPatternDeepSeek = 1;

// The pattern a container's manifest config selects: `tokenizer_pattern` 1 -> kDeepSeekPattern;
// otherwise `tokenizer_han_split` (the public engine's key) false -> kGlmPattern, absent or true
// -> kKimiPattern. A value of the wrong type, or a `tokenizer_pattern` other than 0 or 1, is an
// error naming the key.
Result<Pattern> pattern_for_config(const nlohmann::json& config);

// Splits text into pieces with the same matches as tiktoken's regex (Rust regex / fancy-regex
// semantics: leftmost-first alternation, \s = Unicode White_Space), implemented on ICU regex.
// With several patterns (DeepSeek-V4.1), each later one runs on every piece the earlier ones
// produced, as a text of its own (its lookarounds cannot see past the piece), as the tokenizers
// library's Sequence of isolating Splits does.
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
  // Compiles each split of a pattern; an error names the split and the position.
  static Result<PreTokenizer> create(const Pattern& pattern);

  // Appends the pieces of `text`, in order, as views into `text`; they cover it exactly.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;
  std::vector<std::string_view> split(std::string_view text) const;

  // The pattern texts, in the order they split.
  const std::vector<std::string>& patterns() const noexcept { return patterns_; }

 private:
  struct Compiled;
  PreTokenizer(std::vector<std::string> patterns, std::shared_ptr<const Compiled> compiled);
  void split_valid(std::size_t stage, std::string_view text, std::vector<std::string_view>& pieces) const;

  std::vector<std::string> patterns_;
  // Shared and immutable: an ICU RegexPattern may be used by many matchers at once, so copies
  // of a tokenizer (and threads) share one compiled program per pattern.
  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace waste::tokenizer

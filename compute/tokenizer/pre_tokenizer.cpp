#include "compute/tokenizer/pre_tokenizer.hpp"

#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <nlohmann/json.hpp>

#include "compute/tokenizer/utf8.hpp"

namespace waste::tokenizer {

Result<Pattern> pattern_for_config(const nlohmann::json& config) {
  if (!config.is_object()) return Pattern(kKimiPattern);
  bool han_split = true;
  if (auto it = config.find("tokenizer_han_split"); it != config.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return make_error(Errc::format, "config.tokenizer_han_split: expected a boolean, found " + it->dump());
    }
    han_split = it->get<bool>();
  }
  if (auto it = config.find("tokenizer_pattern"); it != config.end() && !it->is_null()) {
    const bool known = it->is_number_integer() && (it->get<std::int64_t>() == kTokenizerPatternCl100k ||
                                                   it->get<std::int64_t>() == kTokenizerPatternDeepSeek);
    if (!known) {
      return make_error(Errc::format,
                        "config.tokenizer_pattern: expected 0 (one cl100k-style pattern) or 1 (DeepSeek-V4.1's "
                        "three splits), found " + it->dump());
    }
    if (it->get<std::int64_t>() == kTokenizerPatternDeepSeek) return kDeepSeekPattern;
  }
  return Pattern(han_split ? kKimiPattern : kGlmPattern);
}

struct PreTokenizer::Compiled {
  std::vector<std::unique_ptr<icu::RegexPattern>> regex;  // one per split, in order
};

namespace {

// tiktoken's regex crates define \s as the Unicode White_Space property; spelling it out keeps
// the meaning independent of how this ICU version defines its own \s.
std::string to_icu_syntax(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[i + 1];
      if (next == 's') {
        out += "\\p{White_Space}";
      } else if (next == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += pattern[i];
        out += next;
      }
      ++i;
      continue;
    }
    out += pattern[i];
  }
  return out;
}

}  // namespace

PreTokenizer::PreTokenizer(std::vector<std::string> patterns, std::shared_ptr<const Compiled> compiled)
    : patterns_(std::move(patterns)), compiled_(std::move(compiled)) {}

Result<PreTokenizer> PreTokenizer::create(std::string_view pattern) { return create(Pattern(pattern)); }

Result<PreTokenizer> PreTokenizer::create(const Pattern& pattern) {
  const auto splits = pattern.splits();
  if (splits.empty()) return make_error(Errc::argument, "pre-tokenizer pattern is empty");
  auto compiled = std::make_shared<Compiled>();
  std::vector<std::string> texts;
  for (std::size_t i = 0; i < splits.size(); ++i) {
    // One pattern keeps the message it always had; a sequence names the split.
    const std::string which = splits.size() == 1 ? std::string() : " (split " + std::to_string(i + 1) + " of " +
                                                                        std::to_string(splits.size()) + ")";
    if (splits[i].empty()) return make_error(Errc::argument, "pre-tokenizer pattern" + which + " is empty");
    const std::string icu_pattern = to_icu_syntax(splits[i]);
    UParseError parse_error{};
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::RegexPattern> regex(
        icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(icu_pattern), 0, parse_error, status));
    if (U_FAILURE(status) || !regex) {
      return make_error(Errc::argument, "pre-tokenizer pattern" + which + " does not compile (" +
                                            std::string(u_errorName(status)) + " at line " +
                                            std::to_string(parse_error.line) + ", offset " +
                                            std::to_string(parse_error.offset) + " of the ICU form '" + icu_pattern +
                                            "')");
    }
    compiled->regex.push_back(std::move(regex));
    texts.emplace_back(splits[i]);
  }
  return PreTokenizer(std::move(texts), std::move(compiled));
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  split(text, pieces);
  return pieces;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  std::size_t pos = 0;
  std::vector<std::string_view> current, next;
  while (pos < text.size()) {
    const std::size_t valid = valid_utf8_prefix(text.substr(pos));
    if (valid > 0) {
      // Each split in turn over the pieces of the one before (a single pattern: one pass).
      current.assign(1, text.substr(pos, valid));
      for (std::size_t stage = 0; stage < compiled_->regex.size(); ++stage) {
        next.clear();
        for (const std::string_view piece : current) split_valid(stage, piece, next);
        current.swap(next);
      }
      pieces.insert(pieces.end(), current.begin(), current.end());
      pos += valid;
    } else {
      pieces.push_back(text.substr(pos, 1));  // an ill-formed byte stands alone
      pos += 1;
    }
  }
}

void PreTokenizer::split_valid(std::size_t stage, std::string_view text, std::vector<std::string_view>& pieces) const {
  // ICU matches UTF-16; keep the byte offset of every UTF-16 unit to map matches back.
  icu::UnicodeString utf16;
  std::vector<std::uint32_t> byte_at;  // byte_at[u16 index] = byte offset in text
  byte_at.reserve(text.size() + 1);
  std::size_t pos = 0;
  char32_t cp = 0;
  while (pos < text.size()) {
    const std::size_t len = decode_utf8(text.substr(pos), cp);
    byte_at.push_back(static_cast<std::uint32_t>(pos));
    if (cp >= 0x10000) byte_at.push_back(static_cast<std::uint32_t>(pos));
    utf16.append(static_cast<UChar32>(cp));
    pos += len;
  }
  byte_at.push_back(static_cast<std::uint32_t>(text.size()));

  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> matcher(compiled_->regex[stage]->matcher(utf16, status));
  // No backtracking-stack cap: a megabyte-long whitespace run is valid input, not an attack
  // to stop (the heap grows instead; tiktoken has no cap either).
  if (U_SUCCESS(status)) matcher->setStackLimit(0, status);
  std::size_t covered = 0;  // bytes of text already emitted
  if (U_SUCCESS(status)) {
    while (matcher->find(status) && U_SUCCESS(status)) {
      const std::size_t begin = byte_at[static_cast<std::size_t>(matcher->start(status))];
      const std::size_t end = byte_at[static_cast<std::size_t>(matcher->end(status))];
      if (U_FAILURE(status) || end <= begin) continue;  // empty matches carry no text
      if (begin > covered) pieces.push_back(text.substr(covered, begin - covered));
      pieces.push_back(text.substr(begin, end - begin));
      covered = end;
    }
  }
  // An ICU failure here (stack or time limit) must not lose text: the rest is one piece.
  if (covered < text.size()) pieces.push_back(text.substr(covered));
}

}  // namespace waste::tokenizer

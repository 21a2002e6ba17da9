#include "compute/engram/token_map.hpp"

#include <unicode/normalizer2.h>
#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <unordered_map>

#include "compute/tokenizer/utf8.hpp"

namespace waste::engram {
namespace {

std::u32string code_points(const icu::UnicodeString& s) {
  std::u32string out;
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    out.push_back(static_cast<char32_t>(c));
    i += U16_LENGTH(c);
  }
  return out;
}

bool is_mark(char32_t c) {
  const auto type = u_charType(static_cast<UChar32>(c));
  return type == U_NON_SPACING_MARK || type == U_ENCLOSING_MARK || type == U_COMBINING_SPACING_MARK;
}

// The private-use sentinel that keeps a lone space through the trim.
constexpr char32_t kSentinel = 0xE000;

}  // namespace

std::string engram_normalize(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(status);
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
  if (U_FAILURE(status)) return std::string(text);  // ICU data missing: cannot happen in a linked build
  icu::UnicodeString s = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  s = nfkc->normalize(s, status);
  s = nfd->normalize(s, status);
  // Marks out, then each character lowercased on its own (full mapping, as a one-character text).
  icu::UnicodeString lowered;
  for (const char32_t c : code_points(s)) {
    if (is_mark(c)) continue;
    icu::UnicodeString one(static_cast<UChar32>(c));
    one.toLower(icu::Locale::getRoot());
    lowered += one;
  }
  // Runs of space, tab, CR, LF become one space.
  std::u32string collapsed;
  bool in_run = false;
  for (const char32_t c : code_points(lowered)) {
    const bool blank = c == U' ' || c == U'\t' || c == U'\r' || c == U'\n';
    if (!blank) {
      collapsed.push_back(c);
    } else if (!in_run) {
      collapsed.push_back(U' ');
    }
    in_run = blank;
  }
  if (collapsed == U" ") collapsed = std::u32string(1, kSentinel);
  std::size_t begin = 0, end = collapsed.size();
  while (begin < end && u_isUWhiteSpace(static_cast<UChar32>(collapsed[begin]))) ++begin;
  while (end > begin && u_isUWhiteSpace(static_cast<UChar32>(collapsed[end - 1]))) --end;
  icu::UnicodeString out;
  for (std::size_t i = begin; i < end; ++i) {
    out.append(static_cast<UChar32>(collapsed[i] == kSentinel ? U' ' : collapsed[i]));
  }
  std::string utf8;
  out.toUTF8String(utf8);
  return utf8;
}

Result<CompressedTokenMap> derive_compressed_token_map(std::span<const TokenText> tokens) {
  if (tokens.empty()) return make_error(Errc::argument, "compressed token map: the vocabulary is empty");
  CompressedTokenMap out;
  out.map.reserve(tokens.size());
  std::unordered_map<std::string, std::int32_t> id_of_key;
  for (const TokenText& t : tokens) {
    const bool whole = tokenizer::valid_utf8_prefix(t.text) == t.text.size();
    std::string key;
    if (!whole || t.text.find("\xEF\xBF\xBD") != std::string::npos) {
      key = t.spelling;  // partial UTF-8: nothing to normalize
    } else {
      key = engram_normalize(t.text);
      if (key.empty()) key = t.text;
    }
    auto [it, fresh] = id_of_key.try_emplace(std::move(key), static_cast<std::int32_t>(id_of_key.size()));
    if (fresh && id_of_key.size() > 0x7FFFFFFFu) {
      return make_error(Errc::argument, "compressed token map: more than 2^31 - 1 distinct keys");
    }
    out.map.push_back(it->second);
  }
  out.size = static_cast<std::int64_t>(id_of_key.size());
  return out;
}

}  // namespace waste::engram

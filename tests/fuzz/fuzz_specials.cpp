// libFuzzer: specials.json text -> parse_specials; an accepted table is searched through the
// input itself with SpecialMatcher (every match must lie inside the text and be a special).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "compute/tokenizer/special_tokens.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto specials = waste::tokenizer::parse_specials(text, "fuzz");
  if (!specials) {
    if (specials.error().message.empty()) __builtin_trap();
    return 0;
  }
  const waste::tokenizer::SpecialMatcher matcher(*specials);
  std::size_t from = 0;
  while (from <= text.size()) {
    auto m = matcher.find(text, from);
    if (!m) break;
    if (m->length == 0 || m->offset < from || m->offset + m->length > text.size()) __builtin_trap();
    from = m->offset + m->length;
  }
  return 0;
}

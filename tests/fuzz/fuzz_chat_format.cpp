// libFuzzer: chat.json text -> ChatFormat::parse (JSON, per-role [prefix, suffix] pairs, the
// reference engine's field and file limits).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "compute/prompt/chat_format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto f = waste::ChatFormat::parse(text, "fuzz");
  if (!f) {
    if (f.error().message.empty()) __builtin_trap();
    return 0;
  }
  for (auto role : {waste::ChatRole::system, waste::ChatRole::user, waste::ChatRole::assistant}) {
    const auto& a = f->affixes(role);
    if (a.prefix.size() > waste::ChatFormat::kMaxFieldBytes || a.suffix.size() > waste::ChatFormat::kMaxFieldBytes) {
      __builtin_trap();
    }
  }
  (void)f->present();
  (void)f->open_turn();
  return 0;
}

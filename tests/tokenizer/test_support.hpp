// Helpers shared by the tokenizer tests: building rank files from byte strings.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace waste::test {

inline std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char c : bytes) {
    acc = (acc << 8) | static_cast<unsigned char>(c);
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += kAlphabet[(acc >> bits) & 63];
    }
  }
  if (bits > 0) out += kAlphabet[(acc << (6 - bits)) & 63];
  while (out.size() % 4 != 0) out += '=';
  return out;
}

// The 256 single bytes at ranks 0..255 (rank = byte value), then `merges` at 256, 257, ...
inline std::string rank_file(const std::vector<std::string>& merges) {
  std::string text;
  for (int b = 0; b < 256; ++b) text += base64_encode(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  for (std::size_t i = 0; i < merges.size(); ++i) text += base64_encode(merges[i]) + " " + std::to_string(256 + i) + "\n";
  return text;
}

}  // namespace waste::test

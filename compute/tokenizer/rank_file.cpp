#include "compute/tokenizer/rank_file.hpp"

#include <charconv>
#include <unordered_map>
#include <unordered_set>

namespace waste::tokenizer {
namespace {

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::string decode_base64(std::string_view text) {
  std::string out;
  out.reserve(text.size() * 3 / 4);
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const int v = base64_value(c);
    if (v < 0) continue;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

Result<std::vector<RankEntry>> parse_rank_file(std::string_view text, std::string_view origin) {
  std::vector<RankEntry> entries;
  std::unordered_set<int> seen_ranks;
  std::unordered_map<std::string, std::size_t> seen_bytes;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos) continue;
    const std::string_view rank_text = line.substr(space + 1);
    int rank = -1;
    const auto [end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (ec != std::errc{} || end != rank_text.data() + rank_text.size() || rank < 0) {
      return make_error(Errc::format, std::string(origin) + ": line " + std::to_string(line_no) +
                                          ": rank '" + std::string(rank_text) + "' is not a non-negative integer");
    }
    std::string bytes = decode_base64(line.substr(0, space));
    if (bytes.empty()) {
      return make_error(Errc::format, std::string(origin) + ": line " + std::to_string(line_no) +
                                          ": token for rank " + std::to_string(rank) + " decodes to no bytes");
    }
    if (!seen_ranks.insert(rank).second) {
      return make_error(Errc::format, std::string(origin) + ": line " + std::to_string(line_no) + ": rank " +
                                          std::to_string(rank) + " appears twice");
    }
    if (const auto [it, inserted] = seen_bytes.emplace(bytes, line_no); !inserted) {
      return make_error(Errc::format, std::string(origin) + ": line " + std::to_string(line_no) + ": rank " +
                                          std::to_string(rank) + " repeats the bytes of line " +
                                          std::to_string(it->second));
    }
    entries.push_back(RankEntry{std::move(bytes), rank});
  }
  return entries;
}

}  // namespace waste::tokenizer

// Every token's bytes, with the ordinary tokens sorted by their bytes and the length of the
// prefix each shares with the one before (a trie walked in order: equal prefixes are computed
// once, and a dead prefix skips its whole run of tokens).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace waste::grammar {

class TokenIndex {
 public:
  enum class Kind : std::uint8_t { ordinary, never, eos };

  TokenIndex(std::vector<std::string> tokens, std::vector<Kind> kinds);

  [[nodiscard]] int vocab() const { return int(tokens_.size()); }
  [[nodiscard]] const std::string& bytes(int id) const { return tokens_[std::size_t(id)]; }
  [[nodiscard]] Kind kind(int id) const { return kinds_[std::size_t(id)]; }
  [[nodiscard]] std::span<const std::int32_t> sorted() const { return sorted_; }
  // lcp()[i]: bytes sorted()[i] shares with sorted()[i-1] (0 for i = 0).
  [[nodiscard]] std::span<const std::uint32_t> lcp() const { return lcp_; }
  // The bytes of sorted()[i], from one buffer laid out in sorted order (a walk reads it in order).
  [[nodiscard]] std::string_view sorted_bytes(std::size_t i) const {
    return std::string_view(flat_).substr(offsets_[i], offsets_[i + 1] - offsets_[i]);
  }
  // One past the last sorted index whose first byte is b (a prefix dead at its first byte skips
  // the whole run).
  [[nodiscard]] std::size_t first_byte_end(unsigned char b) const { return first_byte_end_[b]; }
  [[nodiscard]] std::span<const std::int32_t> eos_ids() const { return eos_; }
  [[nodiscard]] std::size_t max_length() const { return max_len_; }

 private:
  std::vector<std::string> tokens_;
  std::vector<Kind> kinds_;
  std::vector<std::int32_t> sorted_;
  std::vector<std::uint32_t> lcp_;
  std::vector<std::int32_t> eos_;
  std::string flat_;
  std::vector<std::uint32_t> offsets_;
  std::array<std::size_t, 256> first_byte_end_{};
  std::size_t max_len_ = 0;
};

}  // namespace waste::grammar

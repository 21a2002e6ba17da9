// Byte-pair encoding of one pre-tokenized piece with tiktoken's rule: start from single bytes and
// repeatedly merge the adjacent pair whose concatenation has the lowest rank (leftmost on ties)
// until no adjacent concatenation is a token.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "compute/tokenizer/rank_file.hpp"

namespace waste::tokenizer {

class BytePairEncoder {
 public:
  BytePairEncoder() = default;
  explicit BytePairEncoder(const std::vector<RankEntry>& entries);

  // Rank of exactly these bytes, or -1.
  int rank_of(std::string_view bytes) const noexcept;

  // Appends the ids of `piece`. A whole-piece token is emitted as is; otherwise the merge loop
  // runs. Every single byte must be a token (true of any real rank file); a byte that is not
  // makes the piece unencodable, reported by returning false after emitting nothing.
  bool encode_piece(std::string_view piece, std::vector<int>& ids) const;

  // The two merge loops, exposed so tests can check that they agree. The quadratic one is
  // tiktoken's own and fastest on short pieces; the heap one keeps megabyte-long pieces linear-ish.
  bool merge_quadratic(std::string_view piece, std::vector<int>& ids) const;
  bool merge_heap(std::string_view piece, std::vector<int>& ids) const;

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int, Hash, std::equal_to<>> ranks_;
};

}  // namespace waste::tokenizer

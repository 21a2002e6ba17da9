// Engram row ids (model-families.md §2.1; the transformers reference's n-gram hash state): for
// each token and each Engram layer, (max_ngram_size - 1) * n_heads rows of that layer's table,
// 24 in the release. Pure integer functions of the tokens: the I/O daemon can compute a whole
// prompt's rows before the forward pass reaches them.
//
// The maths, per token at position t and layer l (ids already through the compressed map):
//   tok[s], s = 0..N-1 (N = max_ngram_size): the id at t - s; once the look-back reaches the
//     sequence start or a dead token (an image-span token; the token itself included), that and
//     every older slot is pad_id instead;
//   rolling = tok[0] * mult[l][0]; for n = 2..N: rolling ^= tok[n-1] * mult[l][n-1], and for each
//     head h, row = rolling % prime[l][n][h] + offset[l][n][h]   (non-negative int64 arithmetic).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compute/engram/engram_layout.hpp"
#include "shared/result.hpp"

namespace waste::engram {

// A history slot where the look-back stops: an image-span token, or before the sequence start.
inline constexpr std::int32_t kDead = -1;

// The compressed ids of the last max_ngram_size - 1 tokens (the look-back of the next token),
// kDead where the history stops. Session state: saved and restored with the KV cache.
class NgramHistory {
 public:
  explicit NgramHistory(int max_ngram_size = 4);
  // A sequence start: nothing to look back at.
  void reset();
  // Appends one token's compressed id, or kDead for an image-span token.
  void push(std::int32_t compressed_or_dead);
  // Newest first: recent()[0] is the token just before the next one.
  std::span<const std::int32_t> recent() const noexcept { return recent_; }
  // Restores a saved look-back (newest first); its length must be max_ngram_size - 1 and each
  // entry kDead or a non-negative id.
  Status restore(std::span<const std::int32_t> newest_first);

 private:
  std::vector<std::int32_t> recent_;
};

// Row ids of one token for one layer into `rows` (layout.columns() entries, column (n - 2) *
// n_heads + head). `current` is the token's compressed id or kDead; `before` its look-back.
// Preconditions (checked by the callers below): ids within the compressed vocabulary.
void token_row_ids(const EngramLayout& layout, std::size_t layer_index, std::int32_t current,
                   std::span<const std::int32_t> before, std::span<std::uint64_t> rows) noexcept;

// The layout with the compressed token map: everything needed to address the tables.
struct EngramTables {
  EngramLayout layout;
  std::vector<std::int32_t> token_map;  // raw token id -> compressed id
};

// Row ids of a run of tokens continuing `history` (which it advances): out[t][l][c] flattened as
// ((t * layers) + l) * columns + c. `dead` (empty, or one flag per token) marks image-span
// tokens. Errors name the token: an id outside the token map.
Result<std::vector<std::uint64_t>> sequence_row_ids(const EngramTables& tables, std::span<const std::int32_t> tokens,
                                                    std::span<const std::uint8_t> dead, NgramHistory& history);

}  // namespace waste::engram

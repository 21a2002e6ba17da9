// The Engram addressing data of a DeepSeek-V4.1 container (model-families.md §2.1, §2.3): per
// Engram layer, the hash multipliers and the bucket primes with their row offsets; engram.json
// carries them as exact integers, and the compressed token map beside it (engram_json.hpp).
//
// derive_engram_layout is the conversion-time half: the same numbers the transformers reference
// derives at model build time (sympy primes, numpy PCG64 multipliers), computed here in integer
// arithmetic so neither Python nor floating point is ever involved.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shared/result.hpp"

namespace waste::engram {

struct EngramLayer {
  int layer = 0;                            // the decoder layer it feeds (1 and 14 in the release)
  std::vector<std::int64_t> multipliers;    // [max_ngram_size]: one per look-back, shift 0 = the token itself
  std::vector<std::uint64_t> primes;        // [(max_ngram_size - 1) * n_heads]: column (n - 2) * n_heads + head
  std::vector<std::uint64_t> offsets;       // same columns: the first row of each column's bucket range
  std::uint64_t rows() const noexcept {     // rows of this layer's table: the sum of its primes
    return primes.empty() ? 0 : offsets.back() + primes.back();
  }
};

struct EngramLayout {
  std::int64_t compressed_vocab_size = 0;  // ids of the compressed token map
  std::int64_t pad_id = 0;                 // compressed id used where the look-back stops
  int max_ngram_size = 0;                  // n-grams of sizes 2..max_ngram_size
  int n_heads = 0;                         // buckets per n-gram size
  int head_dim = 0;                        // width of a table row
  std::vector<EngramLayer> layers;

  // Row ids per token per layer: 24 in the release (3 n-gram sizes x 8 heads).
  int columns() const noexcept { return (max_ngram_size - 1) * n_heads; }
};

// The reference's multipliers for one layer: numpy default_rng(10007 * layer_id).integers(0,
// bound, max_ngram_size, int64) with bound = max(1, (INT64_MAX / compressed_vocab_size) / 2),
// each v made 2v + 1 (odd, and small enough that id * multiplier fits int64).
std::vector<std::int64_t> hash_multipliers(int layer_id, int max_ngram_size, std::int64_t compressed_vocab_size);

struct EngramParams {
  std::vector<int> layer_ids;                // engram_layer_ids, in order (the primes depend on it)
  int max_ngram_size = 0;                    // engram_max_ngram_size
  int n_heads = 0;                           // engram_n_heads
  int head_dim = 0;                          // engram_head_dim
  std::uint64_t engram_vocab_size = 0;       // engram_vocab_size: the primes start above it - 1
  std::int64_t compressed_vocab_size = 0;    // engram_compressed_vocab_size
  std::int64_t pad_id = 0;                   // the pad token's compressed id
  std::vector<std::uint64_t> num_embeddings; // engram_num_embeddings, checked against the primes; may be empty
};

// Conversion-time derivation of the whole layout. Errors name the parameter: a layer id below 0
// or repeated, sizes out of range, a pad id outside the compressed vocabulary, or table rows
// that differ from engram_num_embeddings (a different model, or a different rule).
Result<EngramLayout> derive_engram_layout(const EngramParams& params);

}  // namespace waste::engram

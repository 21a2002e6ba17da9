// Primality and the Engram bucket primes (model-families.md §2.1; the transformers reference's
// EngramLayout): conversion-time derivations, frozen into engram.json.
#pragma once

#include <cstdint>
#include <vector>

#include "shared/result.hpp"

namespace waste::engram {

// Deterministic Miller-Rabin over the first twelve primes as bases: exact for every 64-bit n
// (those bases have no common strong liar below 3.3e24).
bool is_prime(std::uint64_t n) noexcept;

// The bucket moduli, [layer][n-gram size - 2][head], for `n_layers` Engram layers with n-gram
// sizes 2..max_ngram_size and `n_heads` heads each. As the reference draws them: for each layer,
// each n-gram size, the search restarts at engram_vocab_size - 1 and each head takes the
// smallest prime above the previous head's (or above the restart point) that no earlier (layer,
// n-gram size, head) took. So all of them are distinct, and taken in that order they are the
// consecutive primes from engram_vocab_size up.
// Errors: max_ngram_size < 2, n_heads < 1, n_layers < 0, engram_vocab_size < 1, or a prime that
// would not fit in 63 bits.
Result<std::vector<std::vector<std::vector<std::uint64_t>>>> draw_bucket_primes(int n_layers, int max_ngram_size,
                                                                               int n_heads,
                                                                               std::uint64_t engram_vocab_size);

}  // namespace waste::engram

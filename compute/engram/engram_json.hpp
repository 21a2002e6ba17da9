// engram.json and engram-tokmap.bin: the Engram addressing data of a container, as the public
// engine writes them at conversion (model-families.md §2.3; its key names):
//
//   engram.json = {"compressed_vocab_size": int, "pad_id": int (a compressed id),
//                  "max_ngram_size": int, "n_heads": int, "head_dim": int,
//                  "layers": [{"layer": int, "multipliers": [max_ngram_size ints],
//                              "primes": [[n_heads ints] x (max_ngram_size - 1)],
//                              "offsets": [(max_ngram_size - 1) * n_heads ints]}, ...]}
//   engram-tokmap.bin = the compressed token map, one little-endian int32 per token id.
//
// All numbers are JSON integers read exactly (never through a double). Untrusted input: every
// value is checked, and an error names the file and the key (layers[1].primes[2][5]); primes
// must be prime and distinct across the file, offsets the running sums of the primes, and
// multipliers odd and small enough that id * multiplier fits int64.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compute/engram/engram_layout.hpp"
#include "compute/engram/ngram_hash.hpp"
#include "shared/result.hpp"

namespace waste::engram {

inline constexpr std::string_view kEngramJsonFile = "engram.json";
inline constexpr std::string_view kTokenMapFile = "engram-tokmap.bin";

Result<EngramLayout> parse_engram_json(std::string_view text, std::string_view origin);
// The document parse_engram_json reads back to the same layout.
std::string engram_json_text(const EngramLayout& layout);

// engram-tokmap.bin: a whole number of int32 ids, each in 0..compressed_vocab_size - 1.
Result<std::vector<std::int32_t>> parse_token_map(std::string_view bytes, std::int64_t compressed_vocab_size,
                                                  std::string_view origin);
std::string token_map_bytes(std::span<const std::int32_t> token_map);

// Both files of a container directory.
Result<EngramTables> load_engram_tables(const std::filesystem::path& container_dir);

}  // namespace waste::engram

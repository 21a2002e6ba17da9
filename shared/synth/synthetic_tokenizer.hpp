// A small but real tiktoken tokenizer for synthetic containers: the 256 single bytes plus merges
// learned by a tiny deterministic BPE trainer over a built-in multilingual corpus, and the 11
// specials of the reference test container (reference §7). Self-contained: waste_shared cannot
// depend on the compute tokenizer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "shared/result.hpp"

namespace waste::synth {

inline constexpr int kSyntheticMerges = 320;
inline constexpr int kSyntheticBaseTokens = 256 + kSyntheticMerges;  // = bos id
inline constexpr int kSyntheticSpecials = 11;

// Writes tokenizer.model and specials.json into `dir` (which must exist). Same seed, same bytes;
// the seed only breaks ties between equally frequent pairs, so the vocabulary size never changes.
Status write_synthetic_tokenizer(const std::filesystem::path& dir, std::uint64_t seed);

// base + 11: what a synthetic container's vocab_size must be (bos = base, eos = base + 2).
int synthetic_tokenizer_vocab();

// The merged tokens in rank order (ranks 256, 257, ...), and the specials' texts in id order.
// Exposed for tests and for tools that want the vocabulary without files.
Result<std::vector<std::string>> train_synthetic_merges(std::uint64_t seed);
const std::vector<std::string>& synthetic_special_texts();

}  // namespace waste::synth

// The compressed token map (model-families.md §2.1; the transformers reference's
// build_compressed_token_map): every token id onto a smaller id space in which tokens whose texts
// normalize alike share an id (" The", "the" and "THE" hash the same). Conversion time: the map
// is written to engram-tokmap.bin and the engine only reads it.
//
// Per token id, in id order: its text is what decoding that one id gives (a BPE token's bytes, an
// added token's content). A text that is not valid UTF-8, or holds U+FFFD, is keyed by the token's
// own vocabulary spelling (GPT-2 escaped) instead; any other text is normalized by the reference's
// chain: NFKC, NFD, remove every mark (General_Category M), lowercase each character (full
// mapping, no context), runs of [ \t\r\n] to one space, a text that is exactly one space kept
// (a sentinel) while the rest are trimmed of White_Space; an empty result keys by the raw text.
// Compressed ids are handed out in order of first appearance of each key.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shared/result.hpp"

namespace waste::engram {

struct TokenText {
  // What decoding the one id gives: a BPE token's bytes; for an added token, what a ByteLevel
  // decoder makes of its content (the bytes its characters stand for when every one is in GPT-2's
  // byte map, else the content's own UTF-8).
  std::string text;
  std::string spelling;  // the vocabulary's key for it (GPT-2 escaped), used for partial UTF-8
};

// The reference's normalizer chain on valid UTF-8 text.
std::string engram_normalize(std::string_view text);

struct CompressedTokenMap {
  std::vector<std::int32_t> map;  // token id -> compressed id
  std::int64_t size = 0;          // distinct keys: engram_compressed_vocab_size
};

// Errors: an empty vocabulary; more than 2^31 - 1 keys.
Result<CompressedTokenMap> derive_compressed_token_map(std::span<const TokenText> tokens);

}  // namespace waste::engram

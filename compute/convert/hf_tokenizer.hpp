// A Hugging Face `tokenizer.json` (the `tokenizers` library's byte-level BPE, as GLM-5.3-Flash
// ships it instead of a tiktoken file) re-encoded as the container's tiktoken rank file
// (model-families.md §1.4, §4):
//
//   * each vocabulary token's text is undone through GPT-2's bytes-to-unicode map into raw bytes
//     and written as "<base64 bytes> <id>" (the id is the rank);
//   * the merge list must be in rank order (the id of each merge's result never goes down): that
//     is what makes merge-by-rank (tiktoken, this engine) and merge-by-list-position (tokenizers)
//     the same encoder. A list out of order is refused, never approximated;
//   * added tokens become specials.json (sorted by id) and are left out of the rank file;
//   * the pre-tokenizer's Split pattern must be one this engine implements: GLM's (the cl100k
//     pattern, with no `[\p{Han}]+` branch, digits `\p{N}{1,3}`) gives han_split false, which
//     the converter writes as `tokenizer_han_split: false` in the manifest's config (the public
//     engine's key); Kimi's pattern gives han_split true (the default, no key written).
//     DeepSeek-V4.1's three Splits, exactly and in order (tokenizer::kDeepSeekSplits), give
//     tokenizer_pattern 1, written as `tokenizer_pattern: 1` (the public engine's key). Every
//     Split must isolate its matches (behavior "Isolated", not inverted), as the engine does;
//   * tokens of the vocabulary that are also added tokens with the same id (DeepSeek's BOS, EOS
//     and PAD at ids 0..2 of its BPE table) are not byte-level text: they are specials, and
//     their ids stay out of the rank file.
// Untrusted input: every failure names the file and the token, merge or key.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/result.hpp"

namespace waste::convert {

struct HfAddedToken {
  int id = 0;
  std::string text;
};

struct HfTokenizer {
  std::string rank_file;              // tiktoken rank file text, lines in id order
  std::vector<HfAddedToken> added;    // added tokens, sorted by id
  bool han_split = true;              // false: GLM's pattern (no Han branch)
  int tokenizer_pattern = 0;          // 1: DeepSeek-V4.1's three splits (tokenizer::kTokenizerPatternDeepSeek)
  int n_inline_specials = 0;          // added tokens that also sit in the BPE vocabulary
  int n_tokens = 0;                   // lines of the rank file
  int n_merges = 0;
};

// GPT-2's byte -> character map (the character's code point), indexed by byte.
const std::vector<char32_t>& gpt2_byte_chars();

Result<HfTokenizer> convert_hf_tokenizer(std::string_view json_text, std::string_view origin);

// The manifest config keys (the public engine's) that make a container select this tokenizer's
// pattern (tokenizer::pattern_for_config): `tokenizer_han_split: false` for GLM's,
// `tokenizer_pattern: 1` for DeepSeek-V4.1's splits; nothing for Kimi's (the default).
void add_pattern_keys(const HfTokenizer& hf, nlohmann::json& config);

// specials.json text ([{"id", "text"}], sorted by id) for the added tokens.
std::string specials_json(const std::vector<HfAddedToken>& added);

}  // namespace waste::convert

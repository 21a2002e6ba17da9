// DeepSeek-V4.1's Engram at conversion (model-families.md §2.1, §2.3): the addressing files
// (engram.json + engram-tokmap.bin, derived by compute/engram from the config and the
// tokenizer) and the tables (engram-L{n}.bin, compute/convert/engram_table.hpp) streamed from
// the checkpoint a chunk of rows at a time, resumable.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "compute/convert/dtype_decode.hpp"
#include "compute/convert/engram_table.hpp"
#include "compute/convert/hf_tokenizer.hpp"
#include "compute/convert/progress.hpp"
#include "compute/engram/engram_layout.hpp"
#include "compute/engram/token_map.hpp"
#include "shared/container/model_config.hpp"
#include "shared/result.hpp"

namespace waste::convert {

// Per token id (0..max id), what decoding it gives and its vocabulary spelling: BPE tokens from
// the rank file (spelling = the bytes through GPT-2's byte map), added tokens from their content
// (the bytes its characters stand for when every one is in GPT-2's map, else its UTF-8). Ids
// with neither are empty.
Result<std::vector<engram::TokenText>> engram_token_texts(const HfTokenizer& hf);

struct EngramAddressing {
  engram::EngramLayout layout;
  std::vector<std::int32_t> token_map;  // vocab_size entries
};

// The layout and the token map for `c`: the map's size must equal engram_compressed_vocab_size
// and the primes must sum to engram_num_embeddings (errors say which). Token ids past the
// tokenizer's (the vocabulary's padding) map to the pad token's compressed id.
Result<EngramAddressing> derive_engram_addressing(const ModelConfig& c, const HfTokenizer& hf);

// engram.json and engram-tokmap.bin into `dir` (each written atomically).
Status write_engram_addressing(const EngramAddressing& a, const std::filesystem::path& dir);

// One table, `source` rows -> `work` (an EngramTableWriter file), `rows_per_chunk` rows
// (a multiple of the page's rows) at a time; after each chunk the file is synced and
// `progress_file` records {"rows", "crc"}, from which a later call resumes.
Status convert_engram_table(const WeightSource& source, const EngramTableHeader& header,
                            const std::filesystem::path& work, const std::filesystem::path& progress_file,
                            std::uint64_t rows_per_chunk, ProgressMode progress);

}  // namespace waste::convert

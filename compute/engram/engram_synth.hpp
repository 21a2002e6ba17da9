// Synthetic Engram files for a DeepSeek-V4.1 config (`waste synth` calls this after
// write_container): engram.json (the layout by compute/engram's own derivations: the
// reference's bucket primes and numpy multipliers), engram-tokmap.bin (an identity-like map:
// token id -> id % engram_compressed_vocab_size) and one engram-L{n}.bin per
// engram_layer_ids entry, written by the converter's table writer with deterministic random rows.
//
// It lives here rather than in shared/synth because the layout's derivations are compute/engram's
// and waste_synth links waste_shared only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "compute/engram/ngram_hash.hpp"
#include "shared/container/model_config.hpp"
#include "shared/result.hpp"

namespace waste::engram {

struct SynthEngramRequest {
  std::uint64_t seed = 0;
  int bits = 8;                // 4 or 8, as `waste convert --engram-bits`
  // 0: the primes start at the config's engram_vocab_size (the tables' rows must then equal
  // engram_num_embeddings, when given). Else every table has at most this many rows: the primes
  // are drawn from a smaller start that fits (engram_num_embeddings is not checked), so a
  // real-shape config's tables fit a disk.
  std::uint64_t max_rows = 0;
};

struct SynthEngramResult {
  EngramTables tables;                  // what was written (the layout, the token map)
  std::uint64_t engram_vocab_size = 0;  // where the prime draw started
  std::uint64_t table_bytes = 0;        // all engram-L{n}.bin files
};

// The value of column `col` of row `row` of layer `layer`'s table before quantization: a pure
// function (counter-based), uniform in [-1, 1), so tests regenerate any row.
float synthetic_engram_value(std::uint64_t seed, int layer, std::uint64_t row, int col) noexcept;

// Writes the three kinds of file into `dir`. Errors: a config without Engram layers, a
// compressed vocabulary of 0, a row cap below the smallest possible tables, the layout's own
// errors (engram_num_embeddings disagreeing with the primes), I/O.
Result<SynthEngramResult> write_synthetic_engram(const ModelConfig& c, const std::filesystem::path& dir,
                                                 const SynthEngramRequest& request);

}  // namespace waste::engram

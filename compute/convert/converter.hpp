// `waste convert`: a Hugging Face checkpoint directory to a WASTE v0 container.
//
// Order of work, and what a crash leaves (docs/design/convert.md):
//   1. config.json normalised; every trunk tensor and every routed expert matrix resolved and
//      shape-checked (dtype, companions) before any output is written; disk space checked.
//   2. per MoE layer: codebooks fitted, experts encoded; books, stats and bank written to
//      OUT/.convert/L{L}.*.tmp, fsync'd and renamed (the bank last: it marks the layer done).
//      A rerun keeps finished layers.
//   3. DeepSeek-V4.1: each Engram table streamed into OUT/.convert/engram-L{n}.part a chunk of
//      rows at a time (OUT/.convert/engram-L{n}.progress records the rows done; a rerun resumes
//      there), renamed to .bin when complete.
//   4. when every MoE layer is done: trunk quantised, codebooks concatenated, banks and Engram
//      tables renamed into place, engram.json and engram-tokmap.bin, tokenizer files, then
//      manifest.json atomically, last; OUT/.convert removed.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "compute/convert/expert_encode.hpp"
#include "compute/convert/progress.hpp"
#include "shared/result.hpp"

namespace waste::convert {

struct ConvertOptions {
  std::filesystem::path src;
  std::filesystem::path out;
  int stages = 3;
  int entries = 256;
  int index_bits = 8;
  int trunk_bits = 4;
  int engram_bits = 8;                       // DeepSeek-V4.1 Engram tables: 4 or 8 (engram_table.hpp)
  std::uint64_t engram_chunk_pages = 4096;   // Engram rows converted per resumable step, in 4 KiB pages (16 MiB)
  int jobs = 0;                              // 0 = hardware threads
  std::optional<std::vector<int>> layers;    // MoE layers to encode in this run (default all)
  ProgressMode progress = ProgressMode::quiet;
  RvqParams rvq;                             // stages/entries overwritten from the fields above
  bool simd = true;                          // false: scalar nearest search (tests)
};

struct LayerReport {
  int layer = 0;
  ErrorSums kinds[3];                        // gate, up, down
  bool resumed = false;                      // finished by an earlier run
};

struct ConvertSummary {
  bool complete = false;                     // manifest written
  std::vector<int> remaining;                // MoE layers still to encode (with --layers)
  std::vector<LayerReport> layers;
  double seconds_read = 0, seconds_kmeans = 0, seconds_encode = 0, seconds_write = 0, seconds_trunk = 0;
  std::uint64_t bytes_in = 0, bytes_out = 0;
  std::string note;                          // lines: tensors left out (MTP, vision), tokenizer.json re-encoded, why chat.json was not written
};

Result<ConvertSummary> convert_checkpoint(const ConvertOptions& options);

// The report file: per layer and matrix kind, the relative weight error.
std::string format_report(const ConvertSummary& summary, const ConvertOptions& options);

}  // namespace waste::convert

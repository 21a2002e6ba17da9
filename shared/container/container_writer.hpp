// Writes a WASTE v0 container directory: trunk tensors row by row (payload streamed, the
// tensor's scale block appended after it), codebooks, expert banks record by record (never
// a whole bank in memory), and manifest.json last, atomically, as the commit record.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shared/container/manifest.hpp"
#include "shared/result.hpp"

namespace waste {

class ContainerWriter {
 public:
  // `skeleton` supplies arch, tensor_prefix, config_json/config and quant; trunk and banks
  // are filled in by the writer. Creates `dir` if needed; existing container files are replaced.
  // `durable`: fsync every data file before the manifest is committed (a crash then leaves
  // either no manifest or a complete container). Synthetic data, cheap to regenerate, may skip it.
  static Result<ContainerWriter> create(const std::filesystem::path& dir, Manifest skeleton, bool durable = true);
  ContainerWriter(ContainerWriter&&) noexcept;
  ContainerWriter& operator=(ContainerWriter&&) noexcept;
  ~ContainerWriter();

  // Trunk tensors, in strictly increasing name order (the converter's sorted order).
  Status begin_tensor(std::string name, std::vector<std::int64_t> shape, TensorFormat fmt);
  // One row: row_stride_bytes() of payload, and n_groups() fp16 scales (none for F32).
  Status append_row(std::span<const std::byte> payload, std::span<const std::uint16_t> scales);
  Status end_tensor();

  // Next positional codebook: entries x vec_dim fp16 centroids.
  Status add_codebook(std::span<const std::uint16_t> centroids);

  // One bank: exactly n_experts records, in expert order, each record_bytes long.
  Status begin_bank(int layer, int codebook_base);
  Status append_record(std::span<const std::byte> record);
  Status end_bank();
  // A bank written elsewhere (the converter's per-layer temporary file, already complete and
  // fsync'd): renamed into place as experts-L{layer}.bin after its size is checked against
  // n_experts x record bytes. Renaming a file that is already in place is a no-op.
  Status adopt_bank(int layer, int codebook_base, const std::filesystem::path& finished_file);

  // Flush, fsync, then write manifest.json atomically. Returns the manifest written.
  Result<Manifest> finish();

 private:
  struct Impl;
  explicit ContainerWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace waste

// manifest.json of a WASTE v0 container (waste-v0-reference.md §1.2, §1.5): the model config,
// the expert quantisation, one expert bank per MoE layer and the trunk tensor index.
// Parsed as untrusted input; every bound of the v0 reference reader is enforced here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/container/model_config.hpp"
#include "shared/result.hpp"

namespace waste {

inline constexpr int kFormatVersion = 0;

// Storage format ids, as written in trunk entries and record headers.
enum class TensorFormat : std::uint8_t {
  f32 = 0,
  f16 = 1,   // never written in v0 trunks; refused by the trunk reader
  q8g = 2,
  q4g = 3,
  vq3r = 4,  // expert records with whole-byte indices (any stage count)
  vq2r = 5,  // accepted in record headers, never written by the v0 converter
  sub1 = 6,
  q3g = 7,
  vq4p = 8,  // 4 stages x 64 entries, 6-bit indices packed 4-in-3 bytes
};

const char* tensor_format_name(TensorFormat fmt) noexcept;

struct ExpertQuant {
  std::string fmt = "VQ3R";  // informational ("VQ3R", "VQ2R", "VQ4P")
  int stages = 3;            // 1..8
  int vec_dim = 8;           // 1..64
  int entries = 256;         // 1..256
  int index_block = 64;      // written for compatibility; the layout always blocks by 64 rows
  int index_bits = 8;        // 8, or 6 only with stages 4 and entries 64 (VQ4P)
  [[nodiscard]] bool packed6() const { return index_bits == 6; }
  // Entries per stage table in memory: every value an index can hold (2^index_bits), so an
  // index byte >= `entries` from a damaged record reads a zero centroid inside the table
  // instead of past it. Codebooks and the LUT buffers are padded to this; no per-index check.
  [[nodiscard]] int table_entries() const { return 1 << index_bits; }
  // Header fmt byte this container's records must carry (4 or 5 for 8-bit, 8 for 6-bit).
  [[nodiscard]] bool record_fmt_ok(std::uint8_t fmt_byte) const;
  [[nodiscard]] double bits_per_weight() const { return double(stages) * index_bits / vec_dim; }
};

struct TrunkTensorInfo {
  std::string name;             // full HF name, including tensor_prefix
  TensorFormat fmt = TensorFormat::f32;
  std::uint64_t offset = 0;     // payload offset in trunk.bin ("off")
  std::vector<std::int64_t> shape;  // original, unpadded HF shape, 1..4 dims
  int group = 128;              // quantised only
  std::uint64_t scale_offset = 0;   // quantised only ("scale_off")
  std::uint64_t bytes = 0;      // payload + scales

  [[nodiscard]] std::int64_t cols() const { return shape.back(); }          // N, inputs
  [[nodiscard]] std::int64_t rows() const;                                  // prod(shape[:-1])
  [[nodiscard]] std::int64_t elements() const { return rows() * cols(); }
  [[nodiscard]] std::int64_t n_groups() const { return (cols() + group - 1) / group; }
  [[nodiscard]] std::int64_t padded_cols() const { return n_groups() * group; }
  [[nodiscard]] std::int64_t row_stride_bytes() const;   // payload bytes per row
  [[nodiscard]] std::uint64_t payload_bytes() const;     // rows * row_stride (F32: rows*cols*4)
  [[nodiscard]] std::uint64_t scale_bytes() const;       // rows * n_groups * 2 (F32: 0)
  [[nodiscard]] bool quantized() const { return fmt != TensorFormat::f32; }
};

struct ExpertBankInfo {
  int layer = 0;
  std::string file;             // "experts-L{layer}.bin", relative to the container
  int experts = 0;
  std::uint64_t bytes = 0;      // file size
  int codebook_base = 0;
  [[nodiscard]] std::uint64_t record_bytes() const { return bytes / std::uint64_t(experts); }
};

struct Manifest {
  int format_version = kFormatVersion;
  std::string arch;             // descriptive
  std::string tensor_prefix;    // "" or "language_model."
  nlohmann::json config_json;   // the config object as stored (flattened, with _outer if any)
  ModelConfig config;
  ExpertQuant quant;
  std::map<int, ExpertBankInfo> banks;   // keyed by layer
  std::vector<TrunkTensorInfo> trunk;    // in file order

  // Validate everything that does not need the files: format_version, config bounds, quant
  // bounds, bank entries against the config, trunk entry bounds (file sizes checked on open).
  static Result<Manifest> parse(std::string_view json_text);
  [[nodiscard]] std::string to_json_text() const;   // pretty, stable key order

  [[nodiscard]] const TrunkTensorInfo* find_tensor(std::string_view name_without_prefix) const;
  [[nodiscard]] std::uint64_t max_record_bytes() const;
};

}  // namespace waste

// One expert record of an experts-L{n}.bin bank (waste-v0-reference.md §1.7): a 48-byte
// header, gate|up|down RVQ indices blocked by 64 rows, gate|up|down fp16 row scales, zero
// padding to a 4 KiB multiple. Records are used in place (in a read buffer or an arena slot):
// ExpertView points into the bytes, nothing is copied or expanded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "shared/container/manifest.hpp"
#include "shared/result.hpp"

namespace waste {

inline constexpr std::uint32_t kExpertMagic = 0x50584557;  // "WEXP"
inline constexpr std::size_t kRecordAlign = 4096;
inline constexpr int kIndexBlockRows = 64;

#pragma pack(push, 1)
struct ExpertRecordHeader {
  std::uint32_t magic;          // kExpertMagic
  std::uint16_t layer;
  std::uint16_t expert_id;
  std::uint8_t fmt;             // 4 (5 accepted) for 8-bit indices, 8 for VQ4P
  std::uint8_t flags;           // always 0, ignored
  std::uint16_t codebook_id;    // the layer's codebook base; the LUT uses this, not the manifest
  std::uint16_t lowrank_id;     // must be 0
  std::uint16_t reserved0;
  std::uint32_t rec_4k_blocks;  // record bytes / 4096
  std::uint32_t gate_off;       // = 48
  std::uint32_t up_off;
  std::uint32_t down_off;
  std::uint32_t chan_corr_off;  // start of the fp16 row scales
  std::uint32_t crc32;          // over [48, chan_corr_off + 2*(M_gate+M_up+M_down))
  std::uint32_t reserved1[2];
};
#pragma pack(pop)
static_assert(sizeof(ExpertRecordHeader) == 48, "v0 record header is 48 bytes on disk");
static_assert(std::is_trivially_copyable_v<ExpertRecordHeader>, "header is read with memcpy");

enum class MatrixKind : std::uint8_t { gate = 0, up = 1, down = 2 };

// Shapes and byte sizes of one record, derived from the config and the quantisation.
struct ExpertGeometry {
  int stages = 3;
  int vec_dim = 8;
  int entries = 256;            // centroids per stage in codebooks.bin
  int lut_entries = 256;        // stage table stride of the books and LUTs (ExpertQuant::table_entries)
  bool packed6 = false;
  int rows[3] = {};             // M per kind (gate, up: moe_inter; down: latent/hidden)
  int cols[3] = {};             // N per kind
  std::uint64_t index_bytes[3] = {};   // nb * (N/vec_dim) * 64 * bytes_per_run
  std::uint64_t payload_end = 0;       // 48 + indices + scales (the CRC span ends here)
  std::uint64_t record_bytes = 0;      // payload_end rounded up to 4096

  static Result<ExpertGeometry> from(const ModelConfig& config, const ExpertQuant& quant);
  [[nodiscard]] int bytes_per_run() const { return packed6 ? 3 : stages; }  // per (row, vector)
  [[nodiscard]] std::uint64_t offset_of(MatrixKind kind) const;      // index data offset
  [[nodiscard]] std::uint64_t scales_offset(MatrixKind kind) const;  // fp16 scales offset
};

// In-place view of a validated record. Lifetime: that of the bytes it points into.
struct ExpertView {
  int layer = 0;
  int expert = 0;
  int codebook_id = 0;
  const std::uint8_t* index[3] = {};   // gate, up, down index data
  const std::uint16_t* scales[3] = {}; // fp16 row scales per kind (may be unaligned: read with memcpy)
};

// O(1) header checks run on every record read from disk (never on cache hits):
// magic, layer, expert id, page count, fmt against the manifest, lowrank_id, codebook range,
// ordered offsets, scale span. Errors read "expert E of layer L: reason".
Status validate_record_header(std::span<const std::byte> record, int layer, int expert,
                              const ExpertQuant& quant, const ExpertGeometry& geometry,
                              int n_codebooks);

// The CRC over exactly the span the v0 reference covers; compare with the header's crc32.
std::uint32_t compute_record_crc(std::span<const std::byte> record, const ExpertGeometry& geometry);
Status verify_record_crc(std::span<const std::byte> record, int layer, int expert,
                         const ExpertGeometry& geometry);

// Writer side: fill the 48-byte header of a record whose indices and scales are already in
// place (offsets from the geometry, fmt byte 8 for VQ4P else 4 as the v0 converter writes),
// then compute and store its crc32. `record` is geometry.record_bytes long.
void finish_record(std::span<std::byte> record, const ExpertGeometry& geometry, int layer, int expert,
                   int codebook_id);

// After validation: pointers into the record.
ExpertView make_expert_view(std::span<const std::byte> record, const ExpertGeometry& geometry);

// Index of (row r, vector position v, stage s) of a matrix's index data (8-bit layout), and
// the 6-bit unpack of VQ4P runs; the kernels inline their own copies, these are the reference.
inline std::uint64_t index_byte_offset(int r, int v, int s, int n_vectors_per_row, int stages) {
  return (std::uint64_t(r / kIndexBlockRows) * n_vectors_per_row + v) * kIndexBlockRows * stages +
         std::uint64_t(r % kIndexBlockRows) * stages + s;
}
inline void unpack_vq4p(const std::uint8_t* run3, std::uint8_t out[4]) {
  out[0] = run3[0] & 63;
  out[1] = ((run3[0] >> 6) | (run3[1] << 2)) & 63;
  out[2] = ((run3[1] >> 4) | (run3[2] << 4)) & 63;
  out[3] = run3[2] >> 2;
}

}  // namespace waste

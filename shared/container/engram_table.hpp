// engram-L{n}.bin: one DeepSeek-V4.1 Engram table of a container (model-families.md §2.3), the
// rows the n-gram hash addresses (compute/engram), quantized at conversion (`--engram-bits`).
// The one definition of the file and of its two row forms: the converter writes it
// (compute/convert/engram_table.hpp), compute/engram reads it (engram_rows.hpp, engram_row.hpp's
// q8 / q4 are these rows), and the I/O daemon may read it (nothing here depends on compute/).
// Layout (all integers little-endian; docs/design/convert.md, "Engram tables"):
//
//   [0, 4096)   header: "WENGRAM\0", version 1, bits (4|8), rows (u64), width, group 32,
//               row_bytes, rows_per_page, page_bytes, layer, data_bytes (u64), data_crc32,
//               header_crc32 (of bytes 0..59); the rest of the page zero.
//   [4096, ..)  pages of page_bytes: rows_per_page rows each, then zero padding. A row is
//               width/32 fp16 scales, then the codes: 8 bits = int8 in -127..127, 4 bits = two per
//               byte (even column in the low nibble), code + 8 for -8..7. value = code x scale.
//
// With row_bytes <= 4096 a page is 4096 bytes and holds floor(4096 / row_bytes) rows, so no row
// crosses a page: one aligned 4 KiB read (O_DIRECT) fetches any row. A wider row takes whole
// pages of its own (page_bytes = row_bytes rounded up to 4096). The released width 256 gives
// 272-byte rows, 15 a page (8 bits), or 144-byte rows, 28 a page (4 bits).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "shared/result.hpp"

namespace waste {

inline constexpr std::uint32_t kEngramTableVersion = 1;
inline constexpr std::size_t kEngramPage = 4096;  // the header's size and the data page size
inline constexpr int kEngramGroup = 32;           // columns per scale
inline constexpr std::string_view kEngramMagic{"WENGRAM\0", 8};

struct EngramTableHeader {
  int bits = 8;  // 4 or 8
  std::uint64_t rows = 0;
  int width = 0;               // columns of a row (engram_head_dim), a multiple of 32
  int layer = 0;               // the decoder layer the table feeds
  std::uint32_t data_crc = 0;  // CRC-32 of the data_bytes() bytes after the header

  [[nodiscard]] std::uint32_t row_bytes() const noexcept;
  [[nodiscard]] std::uint32_t rows_per_page() const noexcept;
  [[nodiscard]] std::uint32_t page_bytes() const noexcept;
  [[nodiscard]] std::uint64_t data_bytes() const noexcept;  // whole pages
  [[nodiscard]] std::uint64_t file_bytes() const noexcept { return kEngramPage + data_bytes(); }
  // Byte offset of a row in the file.
  [[nodiscard]] std::uint64_t row_offset(std::uint64_t row) const noexcept;
};

// bits 4 or 8, width a positive multiple of 32 up to 65536, rows >= 1, layer >= 0.
Status check_engram_header(const EngramTableHeader& h);
// "engram-L14.bin" for layer 14.
std::string engram_table_file_name(int layer);

std::array<std::byte, kEngramPage> encode_engram_header(const EngramTableHeader& h);
// Untrusted bytes (at least 64): magic, version, the stored derived sizes and the header CRC all
// checked; errors name `origin`.
Result<EngramTableHeader> parse_engram_header(std::span<const std::byte> bytes, std::string_view origin);

// One row (width floats) into row_bytes bytes: per group of 32 the scale is fp16(amax / qmax)
// (qmax 127 or 7), codes round half to even, clamped. A group's scale that fp16 cannot hold
// (amax / qmax above 65504) is refused.
// out.size() must be row_bytes for row.size() columns (a multiple of 32).
Status quantize_engram_row(int bits, std::span<const float> row, std::span<std::byte> out);
// out [width] = value = code x scale per column; `in` holds at least the row's bytes (for
// out.size() columns, a multiple of 32). Exact: one f32 product per value, fp16 subnormal
// scales kept.
void dequantize_engram_row(int bits, std::span<const std::byte> in, std::span<float> out);

}  // namespace waste

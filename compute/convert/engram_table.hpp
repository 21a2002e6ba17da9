// engram-L{n}.bin: one DeepSeek-V4.1 Engram table of a container (model-families.md §2.3), the
// rows the n-gram hash addresses (compute/engram), quantized at conversion (`--engram-bits`).
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
#include <string_view>
#include <vector>

#include "shared/container/file_io.hpp"
#include "shared/result.hpp"

namespace waste::convert {

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
std::array<std::byte, kEngramPage> encode_engram_header(const EngramTableHeader& h);
// Untrusted bytes (at least 64): magic, version, the stored derived sizes and the header CRC all
// checked; errors name `origin`.
Result<EngramTableHeader> parse_engram_header(std::span<const std::byte> bytes, std::string_view origin);

// One row (width floats) into row_bytes bytes: per group of 32 the scale is fp16(amax / qmax)
// (qmax 127 or 7), codes round half to even, clamped. A group's scale that fp16 cannot hold
// (amax / qmax above 65504) is refused.
Status quantize_engram_row(int bits, std::span<const float> row, std::span<std::byte> out);
void dequantize_engram_row(int bits, std::span<const std::byte> in, std::span<float> out);

// Writes a table row by row into `path` (normally a work file), packing rows into pages and
// keeping the data CRC. Resumable at page boundaries: `rows_done` rows (a multiple of
// rows_per_page, or all rows) already in the file with CRC `crc_done`; the file is cut there.
class EngramTableWriter {
 public:
  static Result<EngramTableWriter> open(const std::filesystem::path& path, const EngramTableHeader& header,
                                        std::uint64_t rows_done, std::uint32_t crc_done);
  Status append(std::span<const float> row);  // one row of width floats
  // Pages written so far reach the disk (fsync); afterwards rows_done() rows are durable.
  Status sync();
  [[nodiscard]] std::uint64_t rows_done() const noexcept { return rows_; }
  [[nodiscard]] std::uint32_t crc() const noexcept { return crc_; }
  // Pads the last page, writes the header with the CRC, fsyncs. All rows must be appended.
  Status finish();

 private:
  EngramTableWriter() = default;
  Status flush_page();
  std::filesystem::path path_;
  UniqueFd fd_;
  EngramTableHeader header_;
  std::uint64_t rows_ = 0;
  std::uint32_t crc_ = 0;
  std::vector<std::byte> page_;
  std::uint32_t in_page_ = 0;  // rows in page_
};

// Reads rows of a finished table (pread at row_offset); checks the header and the file size.
class EngramTableReader {
 public:
  static Result<EngramTableReader> open(const std::filesystem::path& path);
  [[nodiscard]] const EngramTableHeader& header() const noexcept { return header_; }
  Status read_row(std::uint64_t row, std::span<float> out) const;
  // CRC-32 of the data pages, recomputed (reads the whole file).
  Result<std::uint32_t> data_crc() const;

 private:
  EngramTableReader() = default;
  std::filesystem::path path_;
  UniqueFd fd_;
  EngramTableHeader header_;
};

}  // namespace waste::convert

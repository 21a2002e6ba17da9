// engram-L{n}.bin at conversion: the resumable table writer and a simple row reader. The file
// format (header, page packing, the 4- and 8-bit rows) is shared/container/engram_table.hpp,
// brought into waste::convert here; the forward pass reads the tables through
// compute/engram/engram_rows.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "shared/container/engram_table.hpp"
#include "shared/container/file_io.hpp"
#include "shared/result.hpp"

namespace waste::convert {

using waste::check_engram_header;
using waste::dequantize_engram_row;
using waste::encode_engram_header;
using waste::EngramTableHeader;
using waste::kEngramGroup;
using waste::kEngramMagic;
using waste::kEngramPage;
using waste::kEngramTableVersion;
using waste::parse_engram_header;
using waste::quantize_engram_row;

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

// One Engram table row (engram_head_dim values) from its stored bytes to f32. Three row forms,
// each a self-contained run of bytes so one row is one read (model-families.md §2.1, §2.3):
//
//   f8_e8m0  the release's storage: width F8_E4M3 (FN) codes, then width/32 E8M0 scale bytes
//            (value = e4m3(code) * 2^(scale - 127)); 264 B at width 256. Lossless.
//   q8       width/32 fp16 scales (little-endian), then width int8 codes: value = code * scale;
//            272 B at width 256.
//   q4       width/32 fp16 scales, then width/2 bytes of 4-bit codes (low nibble = even column):
//            value = (nibble - 8) * scale; 144 B at width 256.
//
// q8 / q4 are exactly the rows of the container's engram-L{n}.bin at 8 and 4 bits (`waste
// convert --engram-bits 8 / 4`; shared/container/engram_table.hpp, the one format and the one
// decoder of those rows: this file calls it). f8_e8m0 is the release's storage, read by the
// converter. The width must be a positive multiple of 32 (256 in the release).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "shared/result.hpp"

namespace waste::engram {

enum class EngramRowFormat : std::uint8_t { f8_e8m0, q8, q4 };

inline constexpr int kEngramScaleGroup = 32;  // columns per scale, every form

// "f8_e8m0", "q8", "q4".
const char* engram_row_format_name(EngramRowFormat f);

// Bytes of one row of `width` columns, or Errc::format when width is not a positive multiple of
// 32: "engram row width 100 is not a positive multiple of 32".
Result<std::int64_t> engram_row_bytes(EngramRowFormat f, int width);

// out [width] = the row's values. row must hold exactly engram_row_bytes(f, width) bytes:
// "engram q4 row of width 256: 143 bytes, expected 144". E4M3's NaN codes (0x7F, 0xFF) and
// the E8M0 NaN scale (0xFF) decode to NaN as the dtype defines; the converter should refuse them.
Status engram_dequantize_row(EngramRowFormat f, std::span<const std::uint8_t> row, std::span<float> out);

}  // namespace waste::engram

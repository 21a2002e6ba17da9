// Engram row decoding (engram_row.hpp).
#include "compute/engram/engram_row.hpp"

#include <string>

#include "compute/convert/dtype_decode.hpp"
#include "shared/container/engram_table.hpp"

namespace waste::engram {

const char* engram_row_format_name(EngramRowFormat f) {
  switch (f) {
    case EngramRowFormat::q8: return "q8";
    case EngramRowFormat::q4: return "q4";
    case EngramRowFormat::f8_e8m0: break;
  }
  return "f8_e8m0";
}

Result<std::int64_t> engram_row_bytes(EngramRowFormat f, int width) {
  if (width <= 0 || width % kEngramScaleGroup != 0) {
    return make_error(Errc::format, "engram row width " + std::to_string(width) + " is not a positive multiple of " +
                                        std::to_string(kEngramScaleGroup));
  }
  const std::int64_t groups = width / kEngramScaleGroup;
  switch (f) {
    case EngramRowFormat::q8: return std::int64_t(width) + 2 * groups;
    case EngramRowFormat::q4: return std::int64_t(width) / 2 + 2 * groups;
    case EngramRowFormat::f8_e8m0: break;
  }
  return std::int64_t(width) + groups;
}

Status engram_dequantize_row(EngramRowFormat f, std::span<const std::uint8_t> row, std::span<float> out) {
  const int width = int(out.size());
  std::int64_t bytes = 0;
  WASTE_ASSIGN(bytes, engram_row_bytes(f, width));
  if (std::int64_t(row.size()) != bytes) {
    return make_error(Errc::format, std::string("engram ") + engram_row_format_name(f) + " row of width " +
                                        std::to_string(width) + ": " + std::to_string(row.size()) +
                                        " bytes, expected " + std::to_string(bytes));
  }
  if (f == EngramRowFormat::f8_e8m0) {
    const std::uint8_t* scales = row.data() + width;
    for (int g = 0; g < width / kEngramScaleGroup; ++g) {
      const float scale = convert::e8m0_to_f32(scales[g]);
      for (int c = g * kEngramScaleGroup; c < (g + 1) * kEngramScaleGroup; ++c) {
        out[std::size_t(c)] = convert::f8_e4m3fn_to_f32(row[std::size_t(c)]) * scale;
      }
    }
    return ok();
  }
  // q8 / q4: the engram-L{n}.bin rows, through the table's own decoder.
  waste::dequantize_engram_row(f == EngramRowFormat::q8 ? 8 : 4, std::as_bytes(row), out);
  return ok();
}

}  // namespace waste::engram

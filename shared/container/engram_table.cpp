// engram-L{n}.bin's header and rows (engram_table.hpp).
#include "shared/container/engram_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "shared/crc32.hpp"
#include "shared/fp16.hpp"

namespace waste {
namespace {

template <class T>
void put(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);  // little-endian host (x86-64, AArch64), like the file
}
template <class T>
T get(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Field offsets of the header.
constexpr std::size_t kVersion = 8, kBits = 12, kRows = 16, kWidth = 24, kGroup = 28, kRowBytes = 32, kRowsPerPage = 36,
                      kPageBytes = 40, kLayer = 44, kDataBytes = 48, kDataCrc = 56, kHeaderCrc = 60, kHeaderUsed = 64;

constexpr float kFp16Max = 65504.0f;

}  // namespace

std::string engram_table_file_name(int layer) { return "engram-L" + std::to_string(layer) + ".bin"; }

std::uint32_t EngramTableHeader::row_bytes() const noexcept {
  return std::uint32_t(width / kEngramGroup) * 2 + std::uint32_t(width) * std::uint32_t(bits) / 8;
}

std::uint32_t EngramTableHeader::rows_per_page() const noexcept {
  const std::uint32_t rb = row_bytes();
  return rb == 0 ? 0 : (rb <= kEngramPage ? std::uint32_t(kEngramPage / rb) : 1);
}

std::uint32_t EngramTableHeader::page_bytes() const noexcept {
  const std::uint32_t rb = row_bytes();
  return rb <= kEngramPage ? std::uint32_t(kEngramPage)
                           : std::uint32_t((rb + kEngramPage - 1) / kEngramPage * kEngramPage);
}

std::uint64_t EngramTableHeader::data_bytes() const noexcept {
  const std::uint32_t rpp = rows_per_page();
  return rpp == 0 ? 0 : (rows + rpp - 1) / rpp * page_bytes();
}

std::uint64_t EngramTableHeader::row_offset(std::uint64_t row) const noexcept {
  const std::uint32_t rpp = rows_per_page();
  return kEngramPage + row / rpp * page_bytes() + row % rpp * row_bytes();
}

Status check_engram_header(const EngramTableHeader& h) {
  if (h.bits != 4 && h.bits != 8)
    return make_error(Errc::argument, "engram table: bits " + std::to_string(h.bits) + " is not 4 or 8");
  if (h.width < kEngramGroup || h.width > 65536 || h.width % kEngramGroup != 0) {
    return make_error(Errc::argument,
                      "engram table: width " + std::to_string(h.width) + " is not a multiple of 32 in 32..65536");
  }
  if (h.rows < 1 || h.rows > (std::uint64_t(1) << 40)) {
    return make_error(Errc::argument, "engram table: rows " + std::to_string(h.rows) + " is not in 1..2^40");
  }
  if (h.layer < 0 || h.layer > 4096)
    return make_error(Errc::argument, "engram table: layer " + std::to_string(h.layer) + " is not in 0..4096");
  return ok();
}

std::array<std::byte, kEngramPage> encode_engram_header(const EngramTableHeader& h) {
  std::array<std::byte, kEngramPage> b{};
  std::memcpy(b.data(), kEngramMagic.data(), kEngramMagic.size());
  put<std::uint32_t>(b.data() + kVersion, kEngramTableVersion);
  put<std::uint32_t>(b.data() + kBits, std::uint32_t(h.bits));
  put<std::uint64_t>(b.data() + kRows, h.rows);
  put<std::uint32_t>(b.data() + kWidth, std::uint32_t(h.width));
  put<std::uint32_t>(b.data() + kGroup, std::uint32_t(kEngramGroup));
  put<std::uint32_t>(b.data() + kRowBytes, h.row_bytes());
  put<std::uint32_t>(b.data() + kRowsPerPage, h.rows_per_page());
  put<std::uint32_t>(b.data() + kPageBytes, h.page_bytes());
  put<std::uint32_t>(b.data() + kLayer, std::uint32_t(h.layer));
  put<std::uint64_t>(b.data() + kDataBytes, h.data_bytes());
  put<std::uint32_t>(b.data() + kDataCrc, h.data_crc);
  put<std::uint32_t>(b.data() + kHeaderCrc, crc32(std::span(b.data(), kHeaderCrc)));
  return b;
}

Result<EngramTableHeader> parse_engram_header(std::span<const std::byte> b, std::string_view origin) {
  const std::string o(origin);
  if (b.size() < kHeaderUsed)
    return make_error(Errc::format,
                      o + ": " + std::to_string(b.size()) + " bytes, too short for an engram table header");
  if (std::memcmp(b.data(), kEngramMagic.data(), kEngramMagic.size()) != 0) {
    return make_error(Errc::format, o + ": not an engram table (bad magic)");
  }
  const std::uint32_t stored_crc = get<std::uint32_t>(b.data() + kHeaderCrc);
  const std::uint32_t crc = crc32(b.subspan(0, kHeaderCrc));
  if (stored_crc != crc) return make_error(Errc::format, o + ": header CRC mismatch (damaged header)");
  const std::uint32_t version = get<std::uint32_t>(b.data() + kVersion);
  if (version != kEngramTableVersion) {
    return make_error(Errc::format, o + ": version " + std::to_string(version) + " (this build reads version " +
                                        std::to_string(kEngramTableVersion) + ")");
  }
  EngramTableHeader h;
  h.bits = int(get<std::uint32_t>(b.data() + kBits));
  h.rows = get<std::uint64_t>(b.data() + kRows);
  const std::uint32_t width = get<std::uint32_t>(b.data() + kWidth);
  const std::uint32_t layer = get<std::uint32_t>(b.data() + kLayer);
  h.width = width > 65536 ? -1 : int(width);
  h.layer = layer > 4096 ? -1 : int(layer);
  h.data_crc = get<std::uint32_t>(b.data() + kDataCrc);
  if (auto s = check_engram_header(h); !s) return std::unexpected(s.error().with_context(o));
  const std::uint32_t group = get<std::uint32_t>(b.data() + kGroup);
  if (group != std::uint32_t(kEngramGroup))
    return make_error(Errc::format, o + ": group " + std::to_string(group) + " is not 32");
  if (get<std::uint32_t>(b.data() + kRowBytes) != h.row_bytes() ||
      get<std::uint32_t>(b.data() + kRowsPerPage) != h.rows_per_page() ||
      get<std::uint32_t>(b.data() + kPageBytes) != h.page_bytes() ||
      get<std::uint64_t>(b.data() + kDataBytes) != h.data_bytes()) {
    return make_error(Errc::format, o + ": row_bytes, rows_per_page, page_bytes or data_bytes disagree with bits " +
                                        std::to_string(h.bits) + ", width " + std::to_string(h.width) + " and rows " +
                                        std::to_string(h.rows));
  }
  return h;
}

Status quantize_engram_row(int bits, std::span<const float> row, std::span<std::byte> out) {
  const std::size_t n = row.size(), groups = n / kEngramGroup;
  const int qmax = bits == 8 ? 127 : 7, qmin = bits == 8 ? -127 : -8;
  std::memset(out.data(), 0, out.size());
  auto* codes = reinterpret_cast<std::uint8_t*>(out.data() + groups * 2);
  for (std::size_t g = 0; g < groups; ++g) {
    float amax = 0.0f;
    for (std::size_t i = g * kEngramGroup; i < (g + 1) * kEngramGroup; ++i) {
      if (!std::isfinite(row[i])) {
        return make_error(Errc::format, "column " + std::to_string(i) + " is not finite");
      }
      amax = std::max(amax, std::fabs(row[i]));
    }
    if (amax / float(qmax) > kFp16Max) {
      return make_error(Errc::format, "columns " + std::to_string(g * kEngramGroup) + ".." +
                                          std::to_string((g + 1) * kEngramGroup - 1) + ": amax " +
                                          std::to_string(amax) + " needs a scale beyond fp16");
    }
    const std::uint16_t s16 = f32_to_fp16(amax / float(qmax));
    put<std::uint16_t>(out.data() + g * 2, s16);
    const float s = fp16_to_f32(s16);
    for (std::size_t i = g * kEngramGroup; i < (g + 1) * kEngramGroup; ++i) {
      const int q = s > 0.0f ? int(std::clamp(std::nearbyint(row[i] / s), float(qmin), float(qmax))) : 0;
      if (bits == 8) {
        codes[i] = std::uint8_t(std::int8_t(q));
      } else {
        codes[i >> 1] |= std::uint8_t((q + 8) << ((i & 1) * 4));  // even column: low nibble
      }
    }
  }
  return ok();
}

void dequantize_engram_row(int bits, std::span<const std::byte> in, std::span<float> out) {
  const std::size_t n = out.size(), groups = n / kEngramGroup;
  const auto* codes = reinterpret_cast<const std::uint8_t*>(in.data() + groups * 2);
  for (std::size_t g = 0; g < groups; ++g) {
    const float s = fp16_to_f32(get<std::uint16_t>(in.data() + g * 2));
    float* o = out.data() + g * kEngramGroup;
    if (bits == 8) {
      const std::uint8_t* c = codes + g * kEngramGroup;
      for (int i = 0; i < kEngramGroup; ++i) o[i] = float(std::int8_t(c[i])) * s;
    } else {
      const std::uint8_t* c = codes + g * (kEngramGroup / 2);  // even column: low nibble
      for (int i = 0; i < kEngramGroup / 2; ++i) {
        o[2 * i] = float(int(c[i] & 0xf) - 8) * s;
        o[2 * i + 1] = float(int(c[i] >> 4) - 8) * s;
      }
    }
  }
}

}  // namespace waste

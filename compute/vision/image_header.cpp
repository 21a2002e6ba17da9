#include "compute/vision/image_header.hpp"

#include <algorithm>

namespace waste::vision {
namespace {

std::uint32_t be16(const std::uint8_t* p) { return (std::uint32_t(p[0]) << 8) | p[1]; }
std::uint32_t be32(const std::uint8_t* p) { return (be16(p) << 16) | be16(p + 2); }

Result<ImageHeader> png_header(std::span<const std::uint8_t> b, const std::string& name) {
  // Signature (8), then IHDR first: length 13, "IHDR", width, height.
  static constexpr std::uint8_t kIhdr[8] = {0, 0, 0, 13, 'I', 'H', 'D', 'R'};
  if (b.size() < 24 || !std::equal(kIhdr, kIhdr + 8, b.begin() + 8)) {
    return make_error(Errc::format, name + ": PNG without an IHDR header");
  }
  return ImageHeader{be32(&b[16]), be32(&b[20])};
}

Result<ImageHeader> jpeg_header(std::span<const std::uint8_t> b, const std::string& name) {
  std::size_t o = 2;  // after SOI
  for (;;) {
    while (o < b.size() && b[o] != 0xff) ++o;  // (entropy-coded data has no place before a frame)
    while (o < b.size() && b[o] == 0xff) ++o;  // fill bytes
    if (o >= b.size()) break;
    const std::uint8_t m = b[o++];
    if (m == 0x01 || (m >= 0xd0 && m <= 0xd7)) continue;  // TEM, RSTn: no length
    if (m == 0xd9 || m == 0xda) break;                     // EOI or SOS before any frame header
    if (o + 2 > b.size()) break;
    const std::uint32_t length = be16(&b[o]);
    if (length < 2) break;
    const bool sof = m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc;
    if (sof) {
      if (length < 7 || o + 7 > b.size()) break;
      return ImageHeader{be16(&b[o + 5]), be16(&b[o + 3])};  // precision, height, width
    }
    o += length;
  }
  return make_error(Errc::format, name + ": JPEG without a frame header (SOFn)");
}

}  // namespace

Result<ImageHeader> read_image_header(std::span<const std::uint8_t> b, const std::string& name) {
  static constexpr std::uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (b.size() >= 8 && std::equal(kPng, kPng + 8, b.begin())) return png_header(b, name);
  if (b.size() >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return jpeg_header(b, name);
  return make_error(Errc::format, name + ": not a PNG or JPEG image");
}

}  // namespace waste::vision

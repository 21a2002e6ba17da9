// PNG through libpng's simplified API (png_image), which handles every colour type and bit depth.
#include <png.h>

#include <cstring>

#include "compute/vision/codecs.hpp"
#include "compute/vision/exif_orientation.hpp"

namespace waste::vision::detail {
namespace {

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | p[3];
}

// The eXIf chunk, if any, before the first IDAT (the simplified API does not expose it).
int png_orientation(std::span<const std::uint8_t> b) {
  std::size_t o = 8;
  while (o + 8 <= b.size()) {
    const std::uint32_t len = be32(&b[o]);
    const char* type = reinterpret_cast<const char*>(&b[o + 4]);
    if (len > b.size() - o - 8) return 1;
    if (std::memcmp(type, "eXIf", 4) == 0) return exif_orientation(b.subspan(o + 8, len));
    if (std::memcmp(type, "IDAT", 4) == 0) return 1;
    o += 12 + std::size_t(len);
  }
  return 1;
}

}  // namespace

Result<RgbImage> decode_png(std::span<const std::uint8_t> bytes, const std::string& name, const DecodeLimits& limits,
                            int& orientation) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  auto fail = [&](const char* stage) {
    std::string msg = name + ": cannot decode PNG (" + stage + "): " + img.message;
    png_image_free(&img);
    return make_error(Errc::format, msg);
  };
  if (!png_image_begin_read_from_memory(&img, bytes.data(), bytes.size())) return fail("header");
  if (auto ok = check_pixels(img.width, img.height, name, limits); !ok) {
    png_image_free(&img);
    return std::unexpected(ok.error());
  }
  img.format = PNG_FORMAT_RGB;
  RgbImage out;
  out.width = int(img.width);
  out.height = int(img.height);
  out.pixels.resize(PNG_IMAGE_SIZE(img));
  const png_color white{255, 255, 255};
  if (!png_image_finish_read(&img, &white, out.pixels.data(), 0, nullptr)) return fail("pixels");
  orientation = png_orientation(bytes);
  return out;
}

}  // namespace waste::vision::detail

#include "compute/vision/image_decode.hpp"

#include <fcntl.h>

#include <vector>

#include "compute/vision/codecs.hpp"
#include "compute/vision/exif_orientation.hpp"
#include "shared/container/file_io.hpp"

namespace waste::vision {

namespace detail {

Status check_pixels(std::uint64_t width, std::uint64_t height, const std::string& name, const DecodeLimits& limits) {
  if (width == 0 || height == 0 || width * height > limits.max_pixels) {
    return make_error(Errc::argument, name + ": " + std::to_string(width) + "x" + std::to_string(height) +
                                          " pixels exceed the image limit of " + std::to_string(limits.max_pixels) +
                                          " pixels");
  }
  return {};
}

}  // namespace detail

Result<RgbImage> decode_image(std::span<const std::uint8_t> b, const std::string& name, const DecodeLimits& limits) {
  if (b.size() > limits.max_bytes) {
    return make_error(Errc::argument, name + ": " + std::to_string(b.size()) + " bytes exceed the image limit of " +
                                          std::to_string(limits.max_bytes) + " bytes");
  }
  static constexpr std::uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  int orientation = 1;
  Result<RgbImage> image = make_error(Errc::format, name + ": not a PNG or JPEG image");
  if (b.size() >= 8 && std::equal(kPng, kPng + 8, b.begin())) {
    image = detail::decode_png(b, name, limits, orientation);
  } else if (b.size() >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) {
    image = detail::decode_jpeg(b, name, limits, orientation);
  }
  if (!image || orientation == 1) return image;
  return apply_orientation(*image, orientation);
}

Result<RgbImage> decode_image_file(const std::filesystem::path& path, const DecodeLimits& limits) {
  auto fd = open_file(path, O_RDONLY);
  if (!fd) return std::unexpected(fd.error());
  auto size = file_size(fd->get(), path);
  if (!size) return std::unexpected(size.error());
  if (*size > limits.max_bytes) {
    return make_error(Errc::argument, path.string() + ": " + std::to_string(*size) +
                                          " bytes exceed the image limit of " + std::to_string(limits.max_bytes) +
                                          " bytes");
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(*size));
  auto got = pread_full(fd->get(), std::as_writable_bytes(std::span(bytes)), 0);
  if (!got) return std::unexpected(got.error());
  bytes.resize(*got);
  return decode_image(bytes, path.string(), limits);
}

}  // namespace waste::vision

// libFuzzer: an image file as a request's data: URL or `waste run --image` delivers it ->
// vision::decode_image (PNG through libpng, JPEG through libjpeg-turbo, chosen by the magic
// bytes; the EXIF orientation from a PNG eXIf chunk or a JPEG APP1 segment applied). The
// limits are smaller than the defaults (1 MiB encoded, 1 Mpx decoded) so that one input stays
// cheap; the code paths are the same. A refusal names the image; an acceptance is a
// width x height x 3 RGB buffer within the pixel limit.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "compute/vision/image_decode.hpp"

#define WASTE_FUZZ_CHECK(cond)       \
  do {                               \
    if (!(cond)) __builtin_trap();   \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  waste::vision::DecodeLimits limits;
  limits.max_bytes = 1u << 20;
  limits.max_pixels = 1u << 20;
  const std::string name = "image_url 0";
  auto image = waste::vision::decode_image(std::span<const std::uint8_t>(data, size), name, limits);
  if (!image) {
    WASTE_FUZZ_CHECK(image.error().message.starts_with(name + ": "));
    return 0;
  }
  WASTE_FUZZ_CHECK(image->width > 0 && image->height > 0);
  WASTE_FUZZ_CHECK(std::uint64_t(image->width) * std::uint64_t(image->height) <= limits.max_pixels);
  WASTE_FUZZ_CHECK(image->pixels.size() == std::size_t(image->width) * std::size_t(image->height) * 3);
  return 0;
}

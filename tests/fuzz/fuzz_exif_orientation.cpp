// libFuzzer: an EXIF TIFF block (what follows "Exif\0\0" in a JPEG APP1 segment, or a PNG eXIf
// chunk's data) -> vision::exif_orientation, then apply_orientation on a small image whose size
// comes from the input. The orientation is 1..8 whatever the block holds; the turned image has
// the same pixels, width and height swapped for 5..8, and turning it back (6 and 8 are each
// other's inverse, the others their own) gives the original bytes.
#include <cstddef>
#include <cstdint>
#include <span>

#include "compute/vision/exif_orientation.hpp"

#define WASTE_FUZZ_CHECK(cond)       \
  do {                               \
    if (!(cond)) __builtin_trap();   \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace waste::vision;
  const int orientation = exif_orientation(std::span<const std::uint8_t>(data, size));
  WASTE_FUZZ_CHECK(orientation >= 1 && orientation <= 8);

  RgbImage image;
  image.width = 1 + int(size % 7);
  image.height = 1 + int(size / 7 % 5);
  image.pixels.resize(std::size_t(image.width) * std::size_t(image.height) * 3);
  for (std::size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = std::uint8_t(i * 7 + (i < size ? data[i] : 0));

  const RgbImage turned = apply_orientation(image, orientation);
  const bool swap = orientation >= 5;
  WASTE_FUZZ_CHECK(turned.width == (swap ? image.height : image.width));
  WASTE_FUZZ_CHECK(turned.height == (swap ? image.width : image.height));
  WASTE_FUZZ_CHECK(turned.pixels.size() == image.pixels.size());
  const int inverse = orientation == 6 ? 8 : orientation == 8 ? 6 : orientation;
  const RgbImage back = apply_orientation(turned, inverse);
  WASTE_FUZZ_CHECK(back.width == image.width && back.height == image.height && back.pixels == image.pixels);
  return 0;
}

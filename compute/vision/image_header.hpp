// An image's declared size, read from its header without decoding anything (PNG: IHDR; JPEG:
// the first SOFn frame header), so a caller can refuse it or count its pixels before any pixel
// buffer exists. The decoders check the same size again through their libraries.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "shared/result.hpp"

namespace waste::vision {

struct ImageHeader {
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  [[nodiscard]] std::uint64_t pixels() const { return std::uint64_t(width) * height; }
};

// Errors (Errc::format) name `name`: not a PNG or JPEG, or a header that is cut or malformed.
Result<ImageHeader> read_image_header(std::span<const std::uint8_t> bytes, const std::string& name);

}  // namespace waste::vision

// The two decoders behind decode_image (internal to compute/vision): the limits and the name
// are checked and formatted by the caller; `orientation` receives the EXIF value (1 if none).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "compute/vision/image_decode.hpp"

namespace waste::vision::detail {

Result<RgbImage> decode_png(std::span<const std::uint8_t> bytes, const std::string& name,
                            const DecodeLimits& limits, int& orientation);
Result<RgbImage> decode_jpeg(std::span<const std::uint8_t> bytes, const std::string& name,
                             const DecodeLimits& limits, int& orientation);

// "NAME: WxH pixels exceed the image limit of N pixels", or success.
Status check_pixels(std::uint64_t width, std::uint64_t height, const std::string& name, const DecodeLimits& limits);

}  // namespace waste::vision::detail

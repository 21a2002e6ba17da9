// PNG (libpng) and JPEG (libjpeg-turbo) files to 8-bit RGB, with the EXIF orientation applied.
// Alpha is composited onto white; grey, palette and 16-bit PNGs are converted by libpng; CMYK
// JPEGs are refused by libjpeg. Limits on the encoded bytes and on the decoded pixels keep a
// hostile file from exhausting memory or time: the declared size is checked before any pixel
// buffer is allocated (image_header.hpp reads it without decoding), and a progressive JPEG's
// scans are counted. Every error names the file (`name`: a path, or e.g.
// "image_url 2" for a data: URL).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "compute/vision/image.hpp"
#include "shared/result.hpp"

namespace waste::vision {

struct DecodeLimits {
  std::uint64_t max_bytes = 64ull << 20;  // encoded file
  std::uint64_t max_pixels = 64ull << 20; // width x height (64 Mpx: 192 MiB of RGB)
  // A progressive JPEG's scans: each is a pass over the whole coefficient buffer, and a few
  // bytes each, so a small file could ask for thousands. Real encoders write about 10.
  int max_scans = 100;
};

Result<RgbImage> decode_image(std::span<const std::uint8_t> bytes, const std::string& name,
                              const DecodeLimits& limits = {});
Result<RgbImage> decode_image_file(const std::filesystem::path& path, const DecodeLimits& limits = {});

}  // namespace waste::vision

// EXIF orientation (tag 0x0112): which of the eight flips/rotations turns the stored pixels
// into the picture as the camera meant it. Parsed from the TIFF block of a JPEG APP1 "Exif"
// segment or a PNG eXIf chunk; anything unreadable counts as 1 (as stored), like viewers do.
#pragma once

#include <cstdint>
#include <span>

#include "compute/vision/image.hpp"

namespace waste::vision {

// `tiff` starts at the TIFF header ("II*\0" or "MM\0*"); returns 1..8, 1 when absent or malformed.
int exif_orientation(std::span<const std::uint8_t> tiff);

// Apply orientation 2..8 (1 and anything else: unchanged). 5..8 swap width and height.
RgbImage apply_orientation(const RgbImage& image, int orientation);

}  // namespace waste::vision

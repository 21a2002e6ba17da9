// A decoded image as the tower's preprocessing takes it: 8-bit RGB, row-major, no padding.
#pragma once

#include <cstdint>
#include <vector>

namespace waste::vision {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> pixels;  // height x width x 3
};

}  // namespace waste::vision

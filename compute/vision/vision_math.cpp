#include "compute/vision/vision_math.hpp"

#include <cstddef>

namespace waste::vision {

void rope_2d(float* v, int heads, int hd, int x, int y) {
  for (int j = 0; j < hd / 2; ++j) {
    const float f = 1.0f / std::pow(10000.0f, float(4 * (j >> 1)) / float(hd));
    const float angle = float((j & 1) ? y : x) * f;
    const float c = std::cos(angle), s = std::sin(angle);
    for (int h = 0; h < heads; ++h) {
      float* p = v + std::size_t(h) * hd + 2 * j;
      const float a = p[0], b = p[1];
      p[0] = a * c - b * s;
      p[1] = a * s + b * c;
    }
  }
}

}  // namespace waste::vision

#include "compute/vision/position_grid.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace waste::vision {
namespace {

// Source index pair and weight for destination index d of n (src of m), PyTorch's rule:
// coordinate (d + 0.5) * m / n - 0.5 clamped at 0, upper neighbour clamped at m - 1.
struct Tap { int i0, i1; float w; };
Tap tap(int d, int n, int m) {
  float f = (float(d) + 0.5f) * float(m) / float(n) - 0.5f;
  f = std::max(f, 0.0f);
  const int i0 = std::min(int(f), m - 1);
  const int i1 = std::min(i0 + 1, m - 1);
  return {i0, i1, f - float(i0)};
}

}  // namespace

void resize_position_grid(const float* src, int sh, int sw, int D, float* dst, int h, int w) {
  for (int y = 0; y < h; ++y) {
    const Tap a = tap(y, h, sh);
    for (int x = 0; x < w; ++x) {
      const Tap b = tap(x, w, sw);
      const float* s00 = src + (std::size_t(a.i0) * sw + b.i0) * D;
      const float* s01 = src + (std::size_t(a.i0) * sw + b.i1) * D;
      const float* s10 = src + (std::size_t(a.i1) * sw + b.i0) * D;
      const float* s11 = src + (std::size_t(a.i1) * sw + b.i1) * D;
      const float w00 = (1 - a.w) * (1 - b.w), w01 = (1 - a.w) * b.w, w10 = a.w * (1 - b.w), w11 = a.w * b.w;
      float* o = dst + (std::size_t(y) * w + x) * D;
      for (int d = 0; d < D; ++d) o[d] = w00 * s00[d] + w01 * s01[d] + w10 * s10[d] + w11 * s11[d];
    }
  }
}

}  // namespace waste::vision

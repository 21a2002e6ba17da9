// Pixels to the patch matrix the tower's patch embedding multiplies (reference §3.11):
// bilinear resize (half-pixel centres, no antialiasing) to an even gw x gh grid of 14-pixel
// patches with gw*gh <= max_patches, keeping the aspect ratio; normalise (v/255 - mean)/std;
// lay each patch out channel-major (c, row, col), the order of the flattened conv kernel.
#pragma once

#include <cstdint>
#include <vector>

#include "compute/vision/image.hpp"
#include "compute/vision/vision_config.hpp"
#include "shared/result.hpp"

namespace waste::vision {

struct PatchGrid {
  int gw = 0;  // patches across
  int gh = 0;  // patches down
  [[nodiscard]] int patches() const { return gw * gh; }
  [[nodiscard]] int merged() const { return (gw / 2) * (gh / 2); }  // prompt positions after 2x2 merge
};

// The grid for a width x height source: scale = min(1, sqrt(max_patches / native patches)),
// each side rounded to the nearest patch count, at least 2, made even (down), then the longer
// side shrunk by 2 while the product exceeds max_patches.
PatchGrid choose_grid(int width, int height, int patch, int max_patches);

struct Patches {
  PatchGrid grid;
  std::int64_t stride = 0;   // floats per patch row (3*p*p rounded up to 128, tail zero)
  std::vector<float> data;   // grid.patches() x stride, patch (y, x) at row y*gw + x
};

// An error for an empty image or one whose pixel buffer does not match its size.
Result<Patches> preprocess(const RgbImage& image, const VisionConfig& config);

}  // namespace waste::vision

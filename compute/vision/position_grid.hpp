// The learned position grid [sh][sw][D] resized to the image's patch grid [h][w][D]:
// bilinear, align_corners=False (F.interpolate's default, what the tower was trained with).
#pragma once

namespace waste::vision {

void resize_position_grid(const float* src, int sh, int sw, int D, float* dst, int h, int w);

}  // namespace waste::vision

// Patch grid choice and the pixel layout the patch embedding expects.
#include <catch2/catch.hpp>

#include "compute/vision/position_grid.hpp"
#include "compute/vision/preprocess.hpp"

using namespace waste::vision;

TEST_CASE("the patch grid is even, within max_patches, and keeps the aspect", "[vision][preprocess]") {
  // 896x896 at patch 14 is 64x64 = 4096 patches: scaled to 32x32 = 1024, 256 merged positions.
  PatchGrid g = choose_grid(896, 896, 14, 1024);
  CHECK(g.gw == 32);
  CHECK(g.gh == 32);
  CHECK(g.merged() == 256);
  // Small images are not enlarged: 100x60 -> 7.1 x 4.3 patches -> 6 x 4 (even, down).
  g = choose_grid(100, 60, 14, 1024);
  CHECK(g.gw == 6);
  CHECK(g.gh == 4);
  // Never below 2x2, even for a one-pixel image.
  g = choose_grid(1, 1, 14, 1024);
  CHECK(g.gw == 2);
  CHECK(g.gh == 2);
  // A wide panorama: the product stays within the budget.
  g = choose_grid(4000, 300, 14, 1024);
  CHECK(g.gw * g.gh <= 1024);
  CHECK(g.gw % 2 == 0);
  CHECK(g.gh % 2 == 0);
  CHECK(g.gw > 8 * g.gh);
}

TEST_CASE("preprocess lays out each patch channel-major and normalises (v/255 - mean)/std", "[vision][preprocess]") {
  VisionConfig c;
  c.text_hidden = 8;
  // 28x28 source, exactly 2x2 patches: no resampling, pixel (x, y) channel ch = (x + 3y + 50ch) % 256.
  RgbImage img;
  img.width = 28;
  img.height = 28;
  img.pixels.resize(28 * 28 * 3);
  for (int y = 0; y < 28; ++y)
    for (int x = 0; x < 28; ++x)
      for (int ch = 0; ch < 3; ++ch) img.pixels[(y * 28 + x) * 3 + ch] = std::uint8_t((x + 3 * y + 50 * ch) % 256);
  auto p = preprocess(img, c);
  REQUIRE(p.has_value());
  CHECK(p->grid.gw == 2);
  CHECK(p->grid.gh == 2);
  CHECK(p->stride == 640);
  // Patch (1, 1) (index 3), channel 2, row 5, column 9 = source pixel (23, 19).
  const float v = float((23 + 3 * 19 + 100) % 256) / 255.0f;
  CHECK(p->data[3 * 640 + (2 * 14 + 5) * 14 + 9] == (v - 0.5f) / 0.5f);
  CHECK(p->data[3 * 640 + 600] == 0.0f);  // the stride's tail stays zero
}

TEST_CASE("preprocess refuses an empty image and a short pixel buffer", "[vision][preprocess]") {
  VisionConfig c;
  RgbImage img;
  auto empty = preprocess(img, c);
  REQUIRE_FALSE(empty.has_value());
  CHECK(empty.error().message == "image is empty");
  img.width = 4;
  img.height = 4;
  img.pixels.resize(10);
  auto bad = preprocess(img, c);
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message == "image pixel buffer does not match 4x4 RGB");
}

TEST_CASE("the position grid resize at the same size is the identity, and halves average", "[vision][preprocess]") {
  // 2x2 grid, D = 1, values 0 1 / 2 3; to 1x1 (align_corners false) is the centre: 1.5.
  const float src[4] = {0, 1, 2, 3};
  float same[4];
  resize_position_grid(src, 2, 2, 1, same, 2, 2);
  CHECK(same[0] == 0.0f);
  CHECK(same[3] == 3.0f);
  float one = 0;
  resize_position_grid(src, 2, 2, 1, &one, 1, 1);
  CHECK(one == 1.5f);
}

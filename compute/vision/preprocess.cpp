#include "compute/vision/preprocess.hpp"

#include <algorithm>
#include <cmath>

namespace waste::vision {

PatchGrid choose_grid(int width, int height, int patch, int max_patches) {
  const double native = double(width) * double(height) / (double(patch) * patch);
  const double scale = std::min(1.0, std::sqrt(double(max_patches) / native));
  int gw = int(double(width) * scale / patch + 0.5);
  int gh = int(double(height) * scale / patch + 0.5);
  gw = std::max(gw, 2) & ~1;
  gh = std::max(gh, 2) & ~1;
  while (gw * gh > max_patches && (gw > 2 || gh > 2)) {
    if (gw >= gh && gw > 2) {
      gw -= 2;
    } else {
      gh -= 2;
    }
  }
  return {gw, gh};
}

Result<Patches> preprocess(const RgbImage& image, const VisionConfig& c) {
  const int sw = image.width, sh = image.height;
  if (sw <= 0 || sh <= 0) return make_error(Errc::argument, "image is empty");
  if (image.pixels.size() != std::size_t(sw) * std::size_t(sh) * 3) {
    return make_error(Errc::argument, "image pixel buffer does not match " + std::to_string(sw) + "x" +
                                          std::to_string(sh) + " RGB");
  }
  const int p = c.patch;
  Patches out;
  out.grid = choose_grid(sw, sh, p, c.max_patches);
  const int gw = out.grid.gw, gh = out.grid.gh;
  out.stride = (std::int64_t(c.patch_values()) + 127) / 128 * 128;
  out.data.assign(std::size_t(out.grid.patches()) * std::size_t(out.stride), 0.0f);

  // Source coordinate of each destination column / row (half-pixel centres), with the two
  // neighbours and the weight of the second, clamped at the borders. In double: at a source
  // coordinate near 1000 a float weight is off by 6e-5, which a high-contrast edge turns into
  // a visible fraction of a grey level.
  struct Tap { int i0, i1; float w; };
  auto taps = [](int dst, int src) {
    std::vector<Tap> t(static_cast<std::size_t>(dst));
    const double ratio = double(src) / double(dst);
    for (int d = 0; d < dst; ++d) {
      const double f = (double(d) + 0.5) * ratio - 0.5;
      const int i0 = int(std::floor(f));
      const float w = float(f - double(i0));
      t[d] = {std::clamp(i0, 0, src - 1), std::clamp(i0 + 1, 0, src - 1), w};
    }
    return t;
  };
  const auto tx = taps(gw * p, sw);
  const auto ty = taps(gh * p, sh);
  const std::uint8_t* px = image.pixels.data();
  auto at = [&](int y, int x, int ch) { return float(px[(std::size_t(y) * sw + x) * 3 + ch]); };
  for (int Y = 0; Y < gh * p; ++Y) {
    const Tap& a = ty[Y];
    for (int X = 0; X < gw * p; ++X) {
      const Tap& b = tx[X];
      float* dst = out.data.data() + std::size_t((Y / p) * gw + X / p) * std::size_t(out.stride);
      const int j = Y % p, i = X % p;
      for (int ch = 0; ch < 3; ++ch) {
        const float top = (1 - b.w) * at(a.i0, b.i0, ch) + b.w * at(a.i0, b.i1, ch);
        const float bot = (1 - b.w) * at(a.i1, b.i0, ch) + b.w * at(a.i1, b.i1, ch);
        const float v = ((1 - a.w) * top + a.w * bot) / 255.0f;
        dst[(ch * p + j) * p + i] = (v - c.mean[ch]) / c.std[ch];
      }
    }
  }
  return out;
}

}  // namespace waste::vision

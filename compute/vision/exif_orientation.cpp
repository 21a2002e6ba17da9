#include "compute/vision/exif_orientation.hpp"

#include <cstddef>
#include <cstring>

namespace waste::vision {

int exif_orientation(std::span<const std::uint8_t> t) {
  if (t.size() < 8) return 1;
  const bool le = t[0] == 'I' && t[1] == 'I';
  if (!le && !(t[0] == 'M' && t[1] == 'M')) return 1;
  auto u16 = [&](std::size_t o) -> std::uint32_t {
    return le ? std::uint32_t(t[o] | (t[o + 1] << 8)) : std::uint32_t((t[o] << 8) | t[o + 1]);
  };
  auto u32 = [&](std::size_t o) -> std::uint32_t {
    return le ? (u16(o) | (u16(o + 2) << 16)) : ((u16(o) << 16) | u16(o + 2));
  };
  if (u16(2) != 42) return 1;
  const std::uint32_t ifd = u32(4);
  if (ifd > t.size() || t.size() - ifd < 2) return 1;
  const std::uint32_t n = u16(ifd);
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::size_t e = std::size_t(ifd) + 2 + std::size_t(i) * 12;
    if (e + 12 > t.size()) return 1;
    if (u16(e) != 0x0112) continue;
    if (u16(e + 2) != 3 || u32(e + 4) != 1) return 1;  // SHORT, count 1: the value sits inline
    const std::uint32_t v = u16(e + 8);
    return v >= 1 && v <= 8 ? int(v) : 1;
  }
  return 1;
}

RgbImage apply_orientation(const RgbImage& s, int orientation) {
  if (orientation < 2 || orientation > 8) return s;
  const int W = s.width, H = s.height;
  const bool swap = orientation >= 5;
  RgbImage d;
  d.width = swap ? H : W;
  d.height = swap ? W : H;
  d.pixels.resize(s.pixels.size());
  for (int y = 0; y < d.height; ++y) {
    for (int x = 0; x < d.width; ++x) {
      int sx = x, sy = y;  // the stored pixel shown at (x, y)
      switch (orientation) {
        case 2: sx = W - 1 - x; break;                      // mirrored left-right
        case 3: sx = W - 1 - x; sy = H - 1 - y; break;      // rotated 180
        case 4: sy = H - 1 - y; break;                      // mirrored top-bottom
        case 5: sx = y; sy = x; break;                      // transposed
        case 6: sx = y; sy = H - 1 - x; break;              // rotate 90 clockwise to view
        case 7: sx = W - 1 - y; sy = H - 1 - x; break;      // transversed
        case 8: sx = W - 1 - y; sy = x; break;              // rotate 90 counter-clockwise to view
        default: break;
      }
      std::memcpy(&d.pixels[(std::size_t(y) * d.width + x) * 3], &s.pixels[(std::size_t(sy) * W + sx) * 3], 3);
    }
  }
  return d;
}

}  // namespace waste::vision

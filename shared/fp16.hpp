// IEEE half <-> float. Two decoders exist on purpose: the v0 trunk keeps subnormal scales
// (1% of K3's trunk scales are subnormal; flushing them was a real bug in the C engine), while
// the C engine's codebook loader flushes subnormals to zero. A container must give the same
// numbers in both engines, so codebooks use the flushing decode.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace waste {

// Trunk scales, expert row scales: subnormals kept; exponent 31 is treated as a normal
// exponent (not inf/NaN), exactly as the v0 reference decoder does.
inline float fp16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = (h >> 15) & 1u;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else {
    magnitude = std::bit_cast<float>(((exponent + 112u) << 23) | (mantissa << 13));
  }
  return sign ? -magnitude : magnitude;
}

// Codebook centroids: subnormals flushed to signed zero (v0 codebook loader behaviour).
inline float fp16_to_f32_flush(std::uint16_t h) noexcept {
  if (((h >> 10) & 0x1fu) == 0) return (h & 0x8000u) ? -0.0f : 0.0f;
  return fp16_to_f32(h);
}

// Round-to-nearest-even float -> half, with subnormals and overflow to inf (writer side).
std::uint16_t f32_to_fp16(float value) noexcept;

}  // namespace waste

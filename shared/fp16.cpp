#include "shared/fp16.hpp"

namespace waste {

std::uint16_t f32_to_fp16(float value) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits >= 0x7f800000u) {  // inf or NaN
    return sign | (abs_bits > 0x7f800000u ? 0x7e00u : 0x7c00u);
  }
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow to inf
  const std::int32_t exponent = static_cast<std::int32_t>(abs_bits >> 23) - 127;
  if (exponent < -25) return sign;  // below half the smallest subnormal: signed zero
  std::uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
  // Normal halves keep 10 mantissa bits; subnormals lose one more bit per exponent below -14.
  const int shift = exponent >= -14 ? 13 : 13 + (-14 - exponent);
  const std::uint32_t halfway = 1u << (shift - 1);
  const std::uint32_t remainder = mantissa & ((1u << shift) - 1);
  std::uint32_t rounded = mantissa >> shift;
  if (remainder > halfway || (remainder == halfway && (rounded & 1u))) ++rounded;
  if (exponent >= -14) {
    // rounded has the implicit bit at 2^10; a carry into 2^11 bumps the exponent, which the
    // addition below handles because the fields are adjacent.
    const std::uint32_t half = (static_cast<std::uint32_t>(exponent + 15) << 10) + (rounded - 0x400u);
    return static_cast<std::uint16_t>(sign | half);
  }
  return static_cast<std::uint16_t>(sign | rounded);  // subnormal (a carry makes it the smallest normal)
}

}  // namespace waste

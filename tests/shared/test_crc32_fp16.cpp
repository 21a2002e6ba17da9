#include <zlib.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include "shared/crc32.hpp"
#include "shared/fp16.hpp"

namespace {

std::uint32_t zlib_crc(const std::vector<std::byte>& v) {
  return static_cast<std::uint32_t>(::crc32(0L, reinterpret_cast<const Bytef*>(v.data()), static_cast<uInt>(v.size())));
}

}  // namespace

TEST_CASE("crc32 of the check string is 0xCBF43926 and of nothing is 0", "[shared][container]") {
  constexpr std::string_view kCheck = "123456789";
  REQUIRE(waste::crc32(std::as_bytes(std::span(kCheck))) == 0xCBF43926u);
  REQUIRE(waste::crc32({}) == 0u);
}

TEST_CASE("crc32 equals zlib's crc32 on random buffers of every length class", "[shared][container]") {
  std::mt19937_64 rng(42);
  for (std::size_t len : {1u, 3u, 7u, 8u, 9u, 15u, 16u, 63u, 64u, 65u, 1000u, 4096u, 12289u}) {
    std::vector<std::byte> buf(len);
    for (auto& b : buf) b = std::byte(rng() & 0xff);
    INFO("length " << len);
    REQUIRE(waste::crc32(buf) == zlib_crc(buf));
    // Continuing over a split gives the same CRC as one pass, as zlib's crc32() does.
    const std::size_t cut = len / 3;
    const auto head = std::span<const std::byte>(buf).first(cut);
    const auto tail = std::span<const std::byte>(buf).subspan(cut);
    REQUIRE(waste::crc32_update(waste::crc32(head), tail) == zlib_crc(buf));
  }
}

TEST_CASE("fp16 encode rounds to nearest even and round-trips every finite half", "[shared][container]") {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const std::uint32_t exponent = (h >> 10) & 0x1f;
    if (exponent == 0x1f) continue;  // the v0 decoder treats exponent 31 as normal: not a float round trip
    const float f = waste::fp16_to_f32(static_cast<std::uint16_t>(h));
    INFO("half 0x" << std::hex << h);
    REQUIRE(waste::f32_to_fp16(f) == h);
  }
  // Halfway between 1 and the next half (1 + 2^-10): ties go to the even mantissa (1.0).
  REQUIRE(waste::f32_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
  REQUIRE(waste::f32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);
  REQUIRE(waste::f32_to_fp16(1e6f) == 0x7C00);
  REQUIRE(waste::f32_to_fp16(-std::ldexp(1.0f, -26)) == 0x8000);  // below half the smallest subnormal
  REQUIRE(waste::f32_to_fp16(std::ldexp(1.0f, -25) * 1.5f) == 0x0001);
}

TEST_CASE("trunk fp16 decode keeps subnormals, codebook decode flushes them", "[shared][container]") {
  REQUIRE(waste::fp16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  REQUIRE(waste::fp16_to_f32(0x83FF) == -1023.0f * std::ldexp(1.0f, -24));
  REQUIRE(waste::fp16_to_f32_flush(0x0001) == 0.0f);
  REQUIRE(std::signbit(waste::fp16_to_f32_flush(0x83FF)));
  REQUIRE(waste::fp16_to_f32_flush(0x3C00) == 1.0f);
  REQUIRE(waste::fp16_to_f32(0xC000) == -2.0f);
}

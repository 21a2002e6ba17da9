// zlib-compatible CRC-32 (reflected polynomial 0xEDB88320, init and xorout 0xFFFFFFFF),
// the checksum of every v0 expert record. Table-driven, slicing-by-8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace waste {

// Continue a CRC: crc32_update(crc32_update(0, a), b) == crc32(a ++ b), as zlib's crc32().
std::uint32_t crc32_update(std::uint32_t crc, std::span<const std::byte> bytes) noexcept;

inline std::uint32_t crc32(std::span<const std::byte> bytes) noexcept { return crc32_update(0, bytes); }

}  // namespace waste

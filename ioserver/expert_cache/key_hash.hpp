// The bucket of a (layer << 16 | expert) key in a power-of-two open-addressing table: the
// murmur3 32-bit finalizer (reference §4.3), masked. Shared by the slot index and the reuse
// model's ghost history so both spread keys the same way.
#pragma once

#include <cstdint>

namespace waste {

constexpr std::uint32_t key_bucket(std::uint32_t key, std::uint32_t mask) noexcept {
  std::uint32_t h = key;
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h & mask;
}

}  // namespace waste

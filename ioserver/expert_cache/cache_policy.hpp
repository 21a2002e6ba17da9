#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace waste {

// Victim choice of the expert cache (waste-v0-reference.md §4.3; docs/design/daemon.md "Cache policy").
enum class CachePolicy : std::uint8_t {
  lfru = 0,   // least frequently used, ties broken by least recently used (the reference's default)
  lru = 1,    // least recently used
  reuse = 2,  // farthest expected next use: decayed per-token frequency kept across evictions (ghost
              // history) and the layer distance to the record's next chance of use
  echo = 3,   // reuse, with the record's next chance predicted from the past tokens whose routing
              // the current token repeats (routing_echo.hpp; default)
};

inline constexpr CachePolicy kDefaultCachePolicy = CachePolicy::echo;

const char* cache_policy_name(CachePolicy policy) noexcept;
std::optional<CachePolicy> parse_cache_policy(std::string_view text) noexcept;

}  // namespace waste

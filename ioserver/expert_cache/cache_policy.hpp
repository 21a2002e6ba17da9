#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace waste {

// Victim choice of the expert cache (waste-v0-reference.md §4.3).
enum class CachePolicy : std::uint8_t {
  lfru = 0,  // least frequently used, ties broken by least recently used (default)
  lru = 1,   // least recently used
};

const char* cache_policy_name(CachePolicy policy) noexcept;
std::optional<CachePolicy> parse_cache_policy(std::string_view text) noexcept;

}  // namespace waste

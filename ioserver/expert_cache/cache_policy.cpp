#include "ioserver/expert_cache/cache_policy.hpp"

namespace waste {

const char* cache_policy_name(CachePolicy policy) noexcept {
  return policy == CachePolicy::lru ? "lru" : "lfru";
}

std::optional<CachePolicy> parse_cache_policy(std::string_view text) noexcept {
  if (text == "lfru") return CachePolicy::lfru;
  if (text == "lru") return CachePolicy::lru;
  return std::nullopt;
}

}  // namespace waste

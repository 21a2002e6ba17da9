#include "ioserver/expert_cache/cache_policy.hpp"

namespace waste {

const char* cache_policy_name(CachePolicy policy) noexcept {
  switch (policy) {
    case CachePolicy::lru: return "lru";
    case CachePolicy::reuse: return "reuse";
    case CachePolicy::echo: return "echo";
    case CachePolicy::lfru: break;
  }
  return "lfru";
}

std::optional<CachePolicy> parse_cache_policy(std::string_view text) noexcept {
  if (text == "lfru") return CachePolicy::lfru;
  if (text == "lru") return CachePolicy::lru;
  if (text == "reuse") return CachePolicy::reuse;
  if (text == "echo") return CachePolicy::echo;
  return std::nullopt;
}

}  // namespace waste

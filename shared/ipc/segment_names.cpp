#include "shared/ipc/segment_names.hpp"

#include <unistd.h>

#include <cstdlib>

namespace waste::ipc {

Status validate_instance_name(std::string_view instance) {
  if (instance.empty() || instance.size() > 64) {
    return make_error(Errc::argument, "instance name '" + std::string(instance) + "' must be 1..64 characters");
  }
  for (char c : instance) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) {
      return make_error(Errc::argument, "instance name '" + std::string(instance) +
                                            "' may only contain letters, digits, '.', '_' and '-'");
    }
  }
  return ok();
}

namespace {
std::string prefix(std::string_view instance) {
  return "waste_" + std::to_string(::getuid()) + "_" + std::string(instance);
}
}  // namespace

std::string arena_segment_name(std::string_view instance) { return prefix(instance) + "_arena"; }
std::string trunk_segment_name(std::string_view instance) { return prefix(instance) + "_trunk"; }
std::string wake_segment_name(std::string_view instance) { return prefix(instance) + "_wake"; }
std::string ring_segment_prefix(std::string_view instance) { return prefix(instance) + "_c"; }
std::string ring_segment_name(std::string_view instance, int client_idx, std::uint64_t generation) {
  return ring_segment_prefix(instance) + std::to_string(client_idx) + "_g" + std::to_string(generation);
}

namespace {
constexpr std::string_view kArenaSuffix = "_arena";
}  // namespace

std::string wake_segment_name_for_arena(std::string_view arena_name) {
  if (!arena_name.ends_with(kArenaSuffix)) return {};
  return std::string(arena_name.substr(0, arena_name.size() - kArenaSuffix.size())) + "_wake";
}

std::string ring_segment_name_for_arena(std::string_view arena_name, int client_idx, std::uint64_t generation) {
  if (!arena_name.ends_with(kArenaSuffix)) return {};
  return std::string(arena_name.substr(0, arena_name.size() - kArenaSuffix.size())) + "_c" +
         std::to_string(client_idx) + "_g" + std::to_string(generation);
}

}  // namespace waste::ipc

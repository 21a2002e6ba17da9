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

}  // namespace waste::ipc

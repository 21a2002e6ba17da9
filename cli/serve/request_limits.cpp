#include "cli/serve/request_limits.hpp"

namespace waste::serve {
namespace {

RequestLimits& current() {
  static RequestLimits limits;
  return limits;
}

}  // namespace

const RequestLimits& request_limits() { return current(); }
void set_request_limits(const RequestLimits& limits) { current() = limits; }

}  // namespace waste::serve

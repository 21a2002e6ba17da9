#include "result.hpp"

namespace waste {

const char* errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::io: return "io";
    case Errc::format: return "format";
    case Errc::ram_budget: return "ram_budget";
    case Errc::out_of_memory: return "out_of_memory";
    case Errc::argument: return "argument";
    case Errc::unsupported: return "unsupported";
    case Errc::cancelled: return "cancelled";
    case Errc::ipc: return "ipc";
  }
  return "unknown";
}

}  // namespace waste

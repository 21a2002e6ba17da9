// The LUT lookup mode: see lut_mode.hpp.
#include "compute/forward/lut_mode.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>

namespace waste::forward {
namespace {

LutMode from_env() {
  const char* env = std::getenv("WASTE_LUT");
  if (env == nullptr || *env == '\0') return LutMode::f32;
  auto parsed = parse_lut_mode(env, "WASTE_LUT");
  if (!parsed) {
    spdlog::warn("{}; expert LUTs stay f32", parsed.error().message);
    return LutMode::f32;
  }
  return *parsed;
}

std::atomic<LutMode>& setting() {
  static std::atomic<LutMode> value{from_env()};
  return value;
}

}  // namespace

LutMode lut_mode() { return setting().load(std::memory_order_relaxed); }
void set_lut_mode(LutMode mode) { setting().store(mode, std::memory_order_relaxed); }

Result<LutMode> parse_lut_mode(std::string_view text, std::string_view what) {
  if (text == "f32") return LutMode::f32;
  if (text == "q16") return LutMode::q16;
  return make_error(Errc::argument,
                    std::string(what) + ": '" + std::string(text) + "' is not a LUT mode (f32 or q16)");
}

std::string_view lut_mode_name(LutMode mode) { return mode == LutMode::q16 ? "q16" : "f32"; }

}  // namespace waste::forward

// The LUT lookup mode: see lut_mode.hpp.
#include "compute/forward/lut_mode.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>

namespace waste::forward {
namespace {

// The mode and its source. The source is nullptr for the CPU default, else a string literal.
struct Setting {
  std::atomic<LutMode> mode;
  std::atomic<const char*> source;
};

Setting& setting() {
  static Setting value = [] {
    const kernels::KernelTable& kt = kernels::active();
    const char* env = std::getenv("WASTE_LUT");
    auto resolved = resolve_lut_mode(env, kt);
    if (!resolved) {
      spdlog::warn("{}; expert LUTs stay {} (the default on {})", resolved.error().message,
                   lut_mode_name(default_lut_mode(kt)), kt.isa);
      return Setting{default_lut_mode(kt), nullptr};
    }
    const bool from_env = env != nullptr && *env != '\0';
    return Setting{*resolved, from_env ? "WASTE_LUT" : nullptr};
  }();
  return value;
}

}  // namespace

LutMode lut_mode() { return setting().mode.load(std::memory_order_relaxed); }

void set_lut_mode(LutMode mode, const char* by) {
  setting().mode.store(mode, std::memory_order_relaxed);
  setting().source.store(by, std::memory_order_relaxed);
}

Result<LutMode> parse_lut_mode(std::string_view text, std::string_view what) {
  if (text == "f32") return LutMode::f32;
  if (text == "q16") return LutMode::q16;
  return make_error(Errc::argument,
                    std::string(what) + ": '" + std::string(text) + "' is not a LUT mode (f32 or q16)");
}

std::string_view lut_mode_name(LutMode mode) { return mode == LutMode::q16 ? "q16" : "f32"; }

LutMode default_lut_mode(const kernels::KernelTable& kernels) {
  return kernels::has_vector_q16_apply(kernels) ? LutMode::q16 : LutMode::f32;
}

Result<LutMode> resolve_lut_mode(const char* env, const kernels::KernelTable& kernels) {
  if (env == nullptr || *env == '\0') return default_lut_mode(kernels);
  return parse_lut_mode(env, "WASTE_LUT");
}

std::string lut_mode_report() {
  const LutMode mode = lut_mode();
  const char* source = setting().source.load(std::memory_order_relaxed);
  std::string out(lut_mode_name(mode));
  if (source != nullptr) return out + " (" + source + ")";
  const kernels::KernelTable& kt = kernels::active();
  out += std::string(" (default on ") + kt.isa;
  if (!kernels::has_vector_q16_apply(kt)) out += ": no vector q16 apply";
  return out + ")";
}

}  // namespace waste::forward

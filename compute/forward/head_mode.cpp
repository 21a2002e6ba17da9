// The decode head's choice: see head_mode.hpp.
#include "compute/forward/head_mode.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>

#include "compute/forward/int8_mode.hpp"

namespace waste::forward {
namespace {

// The mode and its source. The source is nullptr for the default, else a string literal.
struct Setting {
  std::atomic<HeadMode> mode;
  std::atomic<const char*> source;
};

Setting& setting() {
  static Setting value = [] {
    const char* env = std::getenv("WASTE_DECODE_HEAD");
    auto resolved = resolve_head_mode(env);
    if (!resolved) {
      spdlog::warn("{}; the decode head stays {} (the default)", resolved.error().message,
                   head_mode_name(default_head_mode()));
      return Setting{default_head_mode(), nullptr};
    }
    const bool from_env = env != nullptr && *env != '\0';
    return Setting{*resolved, from_env ? "WASTE_DECODE_HEAD" : nullptr};
  }();
  return value;
}

}  // namespace

HeadMode head_mode() { return setting().mode.load(std::memory_order_relaxed); }

void set_head_mode(HeadMode mode, const char* by) {
  setting().mode.store(mode, std::memory_order_relaxed);
  setting().source.store(by, std::memory_order_relaxed);
}

Result<HeadMode> parse_head_mode(std::string_view text, std::string_view what) {
  if (text == "q8") return HeadMode::q8;
  if (text == "q4") return HeadMode::q4;
  if (text == "q6") return HeadMode::q6;
  return make_error(Errc::argument,
                    std::string(what) + ": '" + std::string(text) + "' is not a decode head (q8, q6 or q4)");
}

std::string_view head_mode_name(HeadMode mode) {
  switch (mode) {
    case HeadMode::q4: return "q4";
    case HeadMode::q6: return "q6";
    case HeadMode::q8: break;
  }
  return "q8";
}

HeadMode default_head_mode() { return HeadMode::q6; }

Result<HeadMode> resolve_head_mode(const char* env) {
  if (env == nullptr || *env == '\0') return default_head_mode();
  return parse_head_mode(env, "WASTE_DECODE_HEAD");
}

std::string head_mode_report() {
  if (!int8_decode_enabled()) return "q8 (decode int8 off: no copy)";
  const char* source = setting().source.load(std::memory_order_relaxed);
  std::string out(head_mode_name(head_mode()));
  return out + " (" + (source != nullptr ? source : "default") + ")";
}

}  // namespace waste::forward

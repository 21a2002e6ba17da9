#include "compute/forward/int8_mode.hpp"

#include <atomic>
#include <cstdlib>
#include <string_view>

namespace waste::forward {

namespace {
// -1: not decided yet (the environment decides on first use), 0 off, 1 on. Relaxed: a plain flag.
std::atomic<int> g_mode{-1};
}  // namespace

bool int8_prefill_enabled() {
  int mode = g_mode.load(std::memory_order_relaxed);
  if (mode < 0) {
    const char* v = std::getenv("WASTE_PREFILL_INT8");
    mode = v != nullptr && (std::string_view(v) == "on" || std::string_view(v) == "1") ? 1 : 0;
    g_mode.store(mode, std::memory_order_relaxed);
  }
  return mode == 1;
}

void set_int8_prefill(bool on) { g_mode.store(on ? 1 : 0, std::memory_order_relaxed); }

const kernels::Int8Acts& quantized_input(const float* x, std::int64_t x_stride, int n, std::int64_t cols) {
  thread_local kernels::Int8Acts buffer;
  kernels::quantize_acts(x, x_stride, n, cols, buffer);
  return buffer;
}

}  // namespace waste::forward

#include "compute/forward/int8_mode.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>

namespace waste::forward {

namespace {
// -1: not decided yet (the environment decides on first use), 0 off, 1 on. Relaxed: a plain flag.
std::atomic<int> g_mode{-1};

int from_env() {
  const char* v = std::getenv("WASTE_PREFILL_INT8");
  if (v == nullptr || *v == '\0') return 1;
  auto parsed = parse_int8_prefill(v, "WASTE_PREFILL_INT8");
  if (!parsed) {
    spdlog::warn("{}; int8 prompt products keep the default (on)", parsed.error().message);
    return 1;
  }
  return *parsed ? 1 : 0;
}
}  // namespace

bool int8_prefill_enabled() {
  int mode = g_mode.load(std::memory_order_relaxed);
  if (mode < 0) {
    mode = from_env();
    g_mode.store(mode, std::memory_order_relaxed);
  }
  return mode == 1;
}

void set_int8_prefill(bool on) { g_mode.store(on ? 1 : 0, std::memory_order_relaxed); }

namespace {
std::atomic<int> g_decode{-1};  // as g_mode, for decode steps

int decode_from_env() {
  const int fallback = kernels::matmul_i8_is_vector() ? 1 : 0;
  const char* v = std::getenv("WASTE_DECODE_INT8");
  if (v == nullptr || *v == '\0') return fallback;
  auto parsed = parse_int8_prefill(v, "WASTE_DECODE_INT8");
  if (!parsed) {
    spdlog::warn("{}; int8 decode products keep the default ({})", parsed.error().message, fallback ? "on" : "off");
    return fallback;
  }
  return *parsed ? 1 : 0;
}
}  // namespace

bool int8_decode_enabled() {
  int mode = g_decode.load(std::memory_order_relaxed);
  if (mode < 0) {
    mode = decode_from_env();
    g_decode.store(mode, std::memory_order_relaxed);
  }
  return mode == 1;
}

void set_int8_decode(bool on) { g_decode.store(on ? 1 : 0, std::memory_order_relaxed); }

bool int8_for_kind(unsigned char kind) { return kind != 0 ? int8_prefill_enabled() : int8_decode_enabled(); }

Result<bool> parse_int8_prefill(std::string_view text, std::string_view what) {
  if (text == "on" || text == "1") return true;
  if (text == "off" || text == "0") return false;
  return make_error(Errc::argument, std::string(what) + ": '" + std::string(text) + "' is not on or off");
}

namespace {
// A 2-D tensor in groups of 128 with whole groups per row: the int8 product's shape
// (kernels::int8_matmul_supports, read from the manifest).
bool int8_shaped(const TrunkTensorInfo& t) {
  return t.group == kernels::kInt8Group && t.shape.size() == 2 && t.cols() % kernels::kInt8Group == 0;
}
}  // namespace

bool has_int8_matrices(const Manifest& manifest) {
  for (const TrunkTensorInfo& t : manifest.trunk) {
    if (t.fmt == TensorFormat::q4g && int8_shaped(t) && t.name.find(".layers.") != std::string::npos) {
      return true;
    }
  }
  return false;
}

bool takes_int8_rules(const kernels::QuantMatrix& w) {
  return w.fmt == std::uint8_t(TensorFormat::q4g) && kernels::int8_matmul_supports(w);
}

bool has_int8_head(const Manifest& manifest) {
  for (const TrunkTensorInfo& t : manifest.trunk) {
    if (t.name.ends_with("lm_head.weight")) {
      return (t.fmt == TensorFormat::q8g || t.fmt == TensorFormat::q4g) && int8_shaped(t);
    }
  }
  return false;
}

const kernels::Int8Acts& quantized_input(const float* x, std::int64_t x_stride, int n, std::int64_t cols) {
  thread_local kernels::Int8Acts buffer;
  kernels::quantize_acts(x, x_stride, n, cols, buffer);
  return buffer;
}

}  // namespace waste::forward

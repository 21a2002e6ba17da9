#include "compute/forward/ops.hpp"

#include <algorithm>
#include <cstring>

#include "compute/forward/int8_mode.hpp"
#include "compute/kernels/dequantize.hpp"
#include "shared/fp16.hpp"

namespace waste::forward {

void matvec(const Exec& exec, const kernels::QuantMatrix& w, const float* x, float* y) {
  const auto* k = &exec.kernels;
  exec.pool.parallel_for(w.rows, kMatvecMinRows,
                         [&](std::int64_t begin, std::int64_t end) { k->matvec(w, x, y, begin, end); });
}

namespace {
void matmul_f32(const Exec& exec, const kernels::QuantMatrix& w, const float* x, std::int64_t x_stride, int n,
                float* y, std::int64_t y_stride) {
  const auto* k = &exec.kernels;
  exec.pool.parallel_for(w.rows, kMatvecMinRows, [&](std::int64_t begin, std::int64_t end) {
    k->matmul(w, x, x_stride, n, y, y_stride, begin, end);
  });
}

void matmul_int8(const Exec& exec, const kernels::QuantMatrix& w, const float* x, std::int64_t x_stride, int n,
                 float* y, std::int64_t y_stride) {
  const kernels::Int8Acts& acts = quantized_input(x, x_stride, n, w.cols);
  const kernels::MatmulI8Fn fn = kernels::matmul_i8();
  exec.pool.parallel_for(w.rows, kMatvecMinRows,
                         [&](std::int64_t begin, std::int64_t end) { fn(w, acts, y, y_stride, begin, end); });
}
// Each run of rows that decide alike (int8(r)) in one call: int8 rows by the int8 product on
// w_int8, the others by f32 on w.
template <class RowTakesInt8>
void by_runs(const Exec& exec, const kernels::QuantMatrix& w, const kernels::QuantMatrix& w_int8, const float* x,
             std::int64_t x_stride, int n, float* y, std::int64_t y_stride, RowTakesInt8 int8) {
  for (int r0 = 0; r0 < n;) {
    const bool run_int8 = int8(r0);
    int r1 = r0 + 1;
    while (r1 < n && int8(r1) == run_int8) ++r1;
    const float* xr = x + std::int64_t(r0) * x_stride;
    float* yr = y + std::int64_t(r0) * y_stride;
    if (run_int8) {
      matmul_int8(exec, w_int8, xr, x_stride, r1 - r0, yr, y_stride);
    } else {
      matmul_f32(exec, w, xr, x_stride, r1 - r0, yr, y_stride);
    }
    r0 = r1;
  }
}
}  // namespace

Int8Rows int8_rows(const Exec& exec, int n) {
  if (n <= 0) return Int8Rows::none;
  if (exec.prompt_rows.empty()) return int8_decode_enabled() ? Int8Rows::all : Int8Rows::none;
  if (std::size_t(n) != exec.prompt_rows.size()) return Int8Rows::none;
  const auto takes = [](unsigned char k) { return int8_for_kind(k); };
  if (std::ranges::all_of(exec.prompt_rows, takes)) return Int8Rows::all;
  return std::ranges::any_of(exec.prompt_rows, takes) ? Int8Rows::mixed : Int8Rows::none;
}

void matvec_tokens(const Exec& exec, const kernels::QuantMatrix& w, const float* x, std::int64_t x_stride, int n,
                   float* y, std::int64_t y_stride) {
  const Int8Rows rows = int8_rows(exec, n);
  if (rows == Int8Rows::none || !takes_int8_rules(w)) {
    matmul_f32(exec, w, x, x_stride, n, y, y_stride);
    return;
  }
  if (rows == Int8Rows::all) {
    matmul_int8(exec, w, x, x_stride, n, y, y_stride);
    return;
  }
  by_runs(exec, w, w, x, x_stride, n, y, y_stride,
          [&](int r) { return int8_for_kind(exec.prompt_rows[std::size_t(r)]); });
}

void head_tokens(const Exec& exec, const kernels::QuantMatrix& w, const kernels::QuantMatrix& w_decode, const float* x,
                 std::int64_t x_stride, std::span<const unsigned char> kinds, float* y, std::int64_t y_stride) {
  const int n = int(kinds.size());
  if (!int8_decode_enabled() || !kernels::int8_matmul_supports(w) || !kernels::int8_matmul_supports(w_decode)) {
    matmul_f32(exec, w, x, x_stride, n, y, y_stride);
    return;
  }
  // Decode rows (kind 0) against w_decode by the int8 product, prompt rows against w by f32.
  by_runs(exec, w, w_decode, x, x_stride, n, y, y_stride, [&](int r) { return kinds[std::size_t(r)] == 0; });
}

float rms_inverse(const float* x, int n, float eps) {
  float ss = 0.0f;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  return 1.0f / std::sqrt(ss / float(n) + eps);
}

void rms_norm(const float* x, const float* w, int n, float eps, float* out) {
  const float inv = rms_inverse(x, n, eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

void ffn_activation(const ModelConfig& c, const float* a, const float* b, int n, float* out) {
  if (c.swiglu_limit > 0.0f) {
    // GLM's clamped SwiGLU: gate <= limit, up in [-limit, limit], then SiLU(gate) * up
    const float lim = c.swiglu_limit;
    for (int i = 0; i < n; ++i) {
      const float gate = std::min(a[i], lim);
      const float up = std::clamp(b[i], -lim, lim);
      out[i] = gate / (1.0f + std::exp(-gate)) * up;
    }
    return;
  }
  if (!c.act_situ) {
    for (int i = 0; i < n; ++i) out[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
    return;
  }
  const float beta = c.situ_beta;
  const float lambda = c.situ_linear_beta;
  for (int i = 0; i < n; ++i) {
    const float gate = beta * std::tanh(a[i] / beta) / (1.0f + std::exp(-a[i]));
    const float up = lambda > 0.0f ? lambda * std::tanh(b[i] / lambda) : b[i];
    out[i] = gate * up;
  }
}

void dequantize_row(const kernels::QuantMatrix& w, std::int64_t row, float* out) {
  kernels::dequantize_row(w, row, out);
}

}  // namespace waste::forward

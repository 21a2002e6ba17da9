#include "compute/forward/ops.hpp"

#include <algorithm>
#include <cstring>

#include "compute/forward/int8_mode.hpp"
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
  if (rows == Int8Rows::none || !kernels::int8_matmul_supports(w)) {
    matmul_f32(exec, w, x, x_stride, n, y, y_stride);
    return;
  }
  if (rows == Int8Rows::all) {
    matmul_int8(exec, w, x, x_stride, n, y, y_stride);
    return;
  }
  // Each run of rows that decide alike in one call: int8 rows by the int8 product, the others by f32.
  for (int r0 = 0; r0 < n;) {
    const bool int8 = int8_for_kind(exec.prompt_rows[std::size_t(r0)]);
    int r1 = r0 + 1;
    while (r1 < n && int8_for_kind(exec.prompt_rows[std::size_t(r1)]) == int8) ++r1;
    const float* xr = x + std::int64_t(r0) * x_stride;
    float* yr = y + std::int64_t(r0) * y_stride;
    if (int8) {
      matmul_int8(exec, w, xr, x_stride, r1 - r0, yr, y_stride);
    } else {
      matmul_f32(exec, w, xr, x_stride, r1 - r0, yr, y_stride);
    }
    r0 = r1;
  }
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
  const std::uint8_t* p = w.payload + row * w.row_stride;
  if (w.fmt == 0) {
    std::memcpy(out, p, std::size_t(w.cols) * sizeof(float));
    return;
  }
  // Per group: decode the scale once, then a format-specific loop the compiler vectorises (MLA
  // dequantises 2 M kv_b weights per layer and token; a per-element switch and scale decode made
  // that 70% of MLA). q * scale is exact in f32 (<= 8 + 11 significant bits), so the values are
  // the same whichever way they are computed.
  const std::int64_t n_groups = (w.cols + w.group - 1) / w.group;
  const std::uint16_t* scales = w.scales + row * n_groups;
  for (std::int64_t g = 0; g < n_groups; ++g) {
    const std::int64_t begin = g * w.group;
    const std::int64_t end = std::min<std::int64_t>(begin + w.group, w.cols);
    std::uint16_t s16;
    std::memcpy(&s16, scales + g, sizeof s16);  // scales may be unaligned
    const float scale = fp16_to_f32(s16);
    switch (w.fmt) {
      case 2:
        for (std::int64_t c = begin; c < end; ++c) out[c] = float(static_cast<std::int8_t>(p[c])) * scale;
        break;
      case 3: {
        // Byte by byte (low nibble = even column) when the group starts on a byte: a per-column
        // parity test kept the loop scalar, 3.2 vs 1.2 ns per weight, and MLA dequantises
        // 2 M of them per layer and token (docs/LEARNED.md).
        std::int64_t c = begin;
        if ((begin & 1) == 0) {
          const std::uint8_t* bytes = p + (begin >> 1);
          float* o = out + begin;
          const std::int64_t pairs = (end - begin) >> 1;
          for (std::int64_t k = 0; k < pairs; ++k) {
            o[2 * k] = float(int(bytes[k] & 15) - 8) * scale;
            o[2 * k + 1] = float(int(bytes[k] >> 4) - 8) * scale;
          }
          c = begin + 2 * pairs;
        }
        for (; c < end; ++c) {
          out[c] = float(int((c & 1) ? (p[c >> 1] >> 4) : (p[c >> 1] & 15)) - 8) * scale;
        }
        break;
      }
      default:  // 7: Q3G bitstream, 3 bits per element LSB-first
        for (std::int64_t c = begin; c < end; ++c) {
          const std::int64_t bit = 3 * c;
          const unsigned v = unsigned(p[bit >> 3] >> (bit & 7)) | unsigned(p[(bit >> 3) + 1]) << (8 - (bit & 7));
          out[c] = float(int(v & 7u) - 4) * scale;
        }
    }
  }
}

}  // namespace waste::forward

// The scalar reference for every KernelTable entry. Its summation order is the contract the
// ISA files reproduce (bit for bit for the RVQ entries; see docs/design/dispatch.md).
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "compute/kernels/dequantize.hpp"
#include "compute/kernels/kernel_impl.hpp"
#include "shared/fp16.hpp"

namespace waste::kernels::detail::generic_impl {
namespace {

float dot_f32(const float* w, const float* x, std::int64_t n) noexcept {
  float acc = 0.0f;
  for (std::int64_t c = 0; c < n; ++c) acc += w[c] * x[c];
  return acc;
}

// Per 128-group: part = sum of q*x in f32 (columns ascending), then acc += scale * part.
template <class Decode>
float dot_grouped(const QuantMatrix& w, std::int64_t r, const float* x, Decode decode) noexcept {
  const std::uint8_t* row = w.payload + r * w.row_stride;
  const std::int64_t n_groups = (w.cols + w.group - 1) / w.group;
  float acc = 0.0f;
  for (std::int64_t g = 0; g < n_groups; ++g) {
    const std::int64_t begin = g * w.group;
    const std::int64_t end = std::min<std::int64_t>(begin + w.group, w.cols);
    float part = 0.0f;
    for (std::int64_t c = begin; c < end; ++c) part += static_cast<float>(decode(row, c)) * x[c];
    acc += fp16_to_f32(load_u16(w.scales, r * n_groups + g)) * part;
  }
  return acc;
}

}  // namespace

void matvec(const QuantMatrix& w, const float* x, float* y, std::int64_t row_begin,
            std::int64_t row_end) {
  switch (w.fmt) {
    case kFmtF32:
      for (std::int64_t r = row_begin; r < row_end; ++r) {
        y[r] = dot_f32(reinterpret_cast<const float*>(w.payload + r * w.row_stride), x, w.cols);
      }
      return;
    case kFmtQ8G:
      for (std::int64_t r = row_begin; r < row_end; ++r) {
        y[r] = dot_grouped(w, r, x, [](const std::uint8_t* row, std::int64_t c) {
          return static_cast<int>(static_cast<std::int8_t>(row[c]));
        });
      }
      return;
    case kFmtQ4G:
      for (std::int64_t r = row_begin; r < row_end; ++r) {
        y[r] = dot_grouped(w, r, x, [](const std::uint8_t* row, std::int64_t c) {
          const unsigned byte = row[c >> 1];
          return static_cast<int>((c & 1) ? (byte >> 4) : (byte & 15u)) - 8;
        });
      }
      return;
    case kFmtQ3G:
      for (std::int64_t r = row_begin; r < row_end; ++r) {
        y[r] = dot_grouped(w, r, x, [](const std::uint8_t* row, std::int64_t c) {
          return q3_value(row, c);
        });
      }
      return;
    default:
      // The trunk loader refuses other formats; reaching this is a bug, not bad input.
      std::abort();
  }
}

// The reference matmul is matvec per token, so it is bit-identical to it by construction.
void matmul(const QuantMatrix& w, const float* x, std::int64_t x_stride, int n, float* y,
            std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end) {
  for (int t = 0; t < n; ++t) matvec(w, x + t * x_stride, y + t * y_stride, row_begin, row_end);
}

void rvq_lut_build(const float* x, const float* const* books, int stages, int entries, int vec_dim,
                   int v_begin, int v_end, float* lut) {
  for (int v = v_begin; v < v_end; ++v) {
    const float* xv = x + static_cast<std::int64_t>(v) * vec_dim;
    float* out_v = lut + static_cast<std::int64_t>(v) * stages * entries;
    for (int s = 0; s < stages; ++s) {
      const float* book = books[s];
      float* out = out_v + static_cast<std::int64_t>(s) * entries;
      for (int e = 0; e < entries; ++e) {
        const float* centroid = book + static_cast<std::int64_t>(e) * vec_dim;
        float acc = 0.0f;
        for (int d = 0; d < vec_dim; ++d) acc += xv[d] * centroid[d];
        out[e] = acc;
      }
    }
  }
}

void rvq_lut_quantize(const float* lut, int n_vectors, int stages, int entries, std::int8_t* lut_q,
                      float* block_scales) {
  const std::int64_t per_vector = static_cast<std::int64_t>(stages) * entries;
  for (int b = 0; b * kLutQuantBlock < n_vectors; ++b) {
    const int v_end = std::min(n_vectors, (b + 1) * kLutQuantBlock);
    const std::int64_t begin = static_cast<std::int64_t>(b) * kLutQuantBlock * per_vector;
    const std::int64_t end = static_cast<std::int64_t>(v_end) * per_vector;
    float mx = 0.0f;
    for (std::int64_t i = begin; i < end; ++i) mx = std::max(mx, std::fabs(lut[i]));
    // Multiply by the rounded inverse, never divide by the scale: the v0 quantisation.
    const float inverse = mx > 0.0f ? 127.0f / mx : 0.0f;
    block_scales[b] = mx / 127.0f;
    for (std::int64_t i = begin; i < end; ++i) {
      const float q = std::nearbyint(lut[i] * inverse);  // default rounding: half to even
      lut_q[i] = static_cast<std::int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
}

void rvq_apply(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin,
               int row_end) {
  assert(row_begin % kRowBlock == 0);
  const int stages = m.stages;
  const std::int64_t per_vector = static_cast<std::int64_t>(stages) * entries;
  for (int r = row_begin; r < row_end; ++r) {
    const std::uint8_t* block =
        m.index + static_cast<std::int64_t>(r / kRowBlock) * m.n_vectors * kRowBlock * stages +
        (r % kRowBlock) * stages;
    float acc = 0.0f;
    for (int v = 0; v < m.n_vectors; ++v) {
      const std::uint8_t* idx = block + static_cast<std::int64_t>(v) * kRowBlock * stages;
      const float* lut_v = lut + v * per_vector;
      float term = lut_v[idx[0]];  // stage terms left to right into a temp, then into acc
      for (int s = 1; s < stages; ++s) term += lut_v[s * entries + idx[s]];
      acc += term;
    }
    y[r] = acc * fp16_to_f32(load_u16(m.scales, r));
  }
}

void rvq_lut_to_q16(float* lut, int stages, int entries, int v_begin, int v_end) {
  const int per_vector = stages * entries;
  assert(per_vector <= kLutQ16MaxSlot && per_vector % 2 == 0);
  float slot[kLutQ16MaxSlot];
  std::int16_t q[kLutQ16MaxSlot];
  for (int v = v_begin; v < v_end; ++v) {
    unsigned char* bytes = reinterpret_cast<unsigned char*>(lut + static_cast<std::int64_t>(v) * per_vector);
    std::memcpy(slot, bytes, sizeof(float) * per_vector);  // the int16s overwrite the floats in place
    float total = 0.0f;
    for (int s = 0; s < stages; ++s) {
      float mx = 0.0f;
      for (int e = 0; e < entries; ++e) mx = std::max(mx, std::fabs(slot[s * entries + e]));
      total += mx;
    }
    const float inverse = total > 0.0f ? kLutQ16Range / total : 0.0f;
    const float scale = total / kLutQ16Range;
    for (int i = 0; i < per_vector; ++i) {
      q[i] = static_cast<std::int16_t>(std::nearbyint(slot[i] * inverse));  // half to even
    }
    std::memcpy(bytes, q, sizeof(std::int16_t) * per_vector);
    std::memcpy(bytes + sizeof(std::int16_t) * per_vector, &scale, sizeof scale);
  }
}

void rvq_apply_q16(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin,
                   int row_end) {
  assert(row_begin % kRowBlock == 0);
  const int stages = m.stages;
  const std::int64_t per_vector = static_cast<std::int64_t>(stages) * entries;
  for (int r = row_begin; r < row_end; ++r) {
    const std::uint8_t* block =
        m.index + static_cast<std::int64_t>(r / kRowBlock) * m.n_vectors * kRowBlock * stages +
        (r % kRowBlock) * stages;
    float acc = 0.0f;
    for (int v = 0; v < m.n_vectors; ++v) {
      const std::uint8_t* idx = block + static_cast<std::int64_t>(v) * kRowBlock * stages;
      const unsigned char* slot = reinterpret_cast<const unsigned char*>(lut + v * per_vector);
      int sum = 0;
      for (int s = 0; s < stages; ++s) {
        std::int16_t q;
        std::memcpy(&q, slot + sizeof q * (s * entries + idx[s]), sizeof q);
        sum += q;
      }
      float scale;
      std::memcpy(&scale, slot + sizeof(std::int16_t) * per_vector, sizeof scale);
      acc += scale * static_cast<float>(sum);
    }
    y[r] = acc * fp16_to_f32(load_u16(m.scales, r));
  }
}

void rvq_apply_vq4p(const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales,
                    float* y, int row_begin, int row_end) {
  assert(row_begin % kRowBlock == 0);
  constexpr int kEntries = 64;
  constexpr int kPerVector = 4 * kEntries;
  constexpr int kRun = 3;
  for (int r = row_begin; r < row_end; ++r) {
    const std::uint8_t* block =
        m.index + static_cast<std::int64_t>(r / kRowBlock) * m.n_vectors * kRowBlock * kRun +
        (r % kRowBlock) * kRun;
    float acc = 0.0f;
    for (int b = 0; b * kLutQuantBlock < m.n_vectors; ++b) {
      const int v_end = std::min(m.n_vectors, (b + 1) * kLutQuantBlock);
      std::int16_t sum = 0;  // at most 4 * 32 * 127 = 16256
      for (int v = b * kLutQuantBlock; v < v_end; ++v) {
        const std::uint8_t* run = block + static_cast<std::int64_t>(v) * kRowBlock * kRun;
        const std::int8_t* t = lut_q + static_cast<std::int64_t>(v) * kPerVector;
        const unsigned i0 = run[0] & 63u;
        const unsigned i1 = ((run[0] >> 6) | (run[1] << 2)) & 63u;
        const unsigned i2 = ((run[1] >> 4) | (run[2] << 4)) & 63u;
        const unsigned i3 = run[2] >> 2;
        sum = static_cast<std::int16_t>(sum + t[i0] + t[kEntries + i1] + t[2 * kEntries + i2] +
                                        t[3 * kEntries + i3]);
      }
      acc += block_scales[b] * static_cast<float>(sum);
    }
    y[r] = acc * fp16_to_f32(load_u16(m.scales, r));
  }
}

void rvq_matmul(const RvqMatrix& m, const float* const* books, int vec_dim, const float* x,
                std::int64_t x_stride, int n, float* y, std::int64_t y_stride, int row_begin,
                int row_end) {
  unsigned idx[8];
  for (int r = row_begin; r < row_end; ++r) {
    const float scale = fp16_to_f32(load_u16(m.scales, r));
    for (int t = 0; t < n; ++t) {
      const float* xt = x + t * x_stride;
      float lane[8] = {};
      std::int64_t c = 0;
      for (int v = 0; v < m.n_vectors; ++v) {
        const std::uint8_t* run = rvq_run(m, r, v);
        if (m.packed6) {
          rvq_unpack6(run, idx);
        } else {
          for (int s = 0; s < m.stages; ++s) idx[s] = run[s];
        }
        for (int d = 0; d < vec_dim; ++d, ++c) {
          float w = books[0][static_cast<std::int64_t>(idx[0]) * vec_dim + d];
          for (int s = 1; s < m.stages; ++s) w += books[s][static_cast<std::int64_t>(idx[s]) * vec_dim + d];
          lane[c % 8] = std::fma(w, xt[c], lane[c % 8]);
        }
      }
      const float sum = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
      y[t * y_stride + r] = sum * scale;
    }
  }
}

void kda_head_step(float* S, const float* q, const float* k, const float* v, const float* g,
                   float beta, int D, float* o) {
  assert(D <= kKdaMaxDim);
  float delta[kKdaMaxDim];
  // Decay rows first, and u = S^T k from the decayed state (u accumulates in o).
  std::fill(o, o + D, 0.0f);
  for (int i = 0; i < D; ++i) {
    float* row = S + static_cast<std::int64_t>(i) * D;
    const float decay = std::exp(g[i]);
    for (int j = 0; j < D; ++j) {
      row[j] *= decay;
      o[j] += row[j] * k[i];
    }
  }
  for (int j = 0; j < D; ++j) delta[j] = beta * (v[j] - o[j]);
  // S += k delta^T, and o = S^T q from the updated rows.
  std::fill(o, o + D, 0.0f);
  for (int i = 0; i < D; ++i) {
    float* row = S + static_cast<std::int64_t>(i) * D;
    for (int j = 0; j < D; ++j) {
      row[j] += k[i] * delta[j];
      o[j] += row[j] * q[i];
    }
  }
}

}  // namespace waste::kernels::detail::generic_impl

namespace waste::kernels::detail {

const KernelTable& generic_table() {
  namespace impl = generic_impl;
  static const KernelTable table{
      .isa = "generic",
      .matvec = impl::matvec,
      .matmul = impl::matmul,
      .rvq_lut_build = impl::rvq_lut_build,
      .rvq_lut_quantize = impl::rvq_lut_quantize,
      .rvq_apply = impl::rvq_apply,
      .rvq_apply_vq4p = impl::rvq_apply_vq4p,
      .rvq_lut_to_q16 = impl::rvq_lut_to_q16,
      .rvq_apply_q16 = impl::rvq_apply_q16,
      .rvq_matmul = impl::rvq_matmul,
      .kda_head_step = impl::kda_head_step,
      .vq4p_from_registers = false,
  };
  return table;
}

}  // namespace waste::kernels::detail

namespace waste::kernels {

void dequantize_row(const QuantMatrix& w, std::int64_t row, float* out) {
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

}  // namespace waste::kernels

// AArch64 NEON kernels (NEON is part of the AArch64 base ISA, so this table is always
// supported there). Same contract as the x86 files (docs/design/dispatch.md):
//   RVQ LUT build, LUT quantise, RVQ apply, VQ4P apply: bit-identical to generic. AArch64 has no
//     gather, so the apply loads table entries lane by lane and gains its speed from four
//     independent rows in flight; each lane still does generic's adds in generic's order.
//   matvec / matmul, kda_head_step: vectorised across columns with FMA; they agree with generic
//     to ~1e-6 relative, and matmul gives each token the bits matvec gives it.
// Built with -ffp-contract=off (compute/CMakeLists.txt): arm_neon.h writes vmulq/vaddq as plain
// vector operators, which the compiler could otherwise fuse.
#if defined(__aarch64__)

#include <arm_neon.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "compute/kernels/kernel_impl.hpp"
#include "shared/fp16.hpp"

namespace waste::kernels::detail::neon_impl {
namespace {

// 16 int8 weights as four float32x4 (columns c..c+15 in order).
inline void widen_s8(int8x16_t q, float32x4_t out[4]) {
  const int16x8_t lo = vmovl_s8(vget_low_s8(q));
  const int16x8_t hi = vmovl_s8(vget_high_s8(q));
  out[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
  out[1] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo)));
  out[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
  out[3] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi)));
}

// 16 Q8G weights at column c of a row.
inline int8x16_t q8_load16(const std::uint8_t* row, std::int64_t c) {
  return vld1q_s8(reinterpret_cast<const std::int8_t*>(row + c));
}

// 16 Q4G weights at column c (c even): 8 bytes, low nibble first, minus 8.
inline int8x16_t q4_load16(const std::uint8_t* row, std::int64_t c) {
  const uint8x8_t bytes = vld1_u8(row + c / 2);
  const uint8x8_t lo = vand_u8(bytes, vdup_n_u8(15));
  const uint8x8_t hi = vshr_n_u8(bytes, 4);
  const uint8x16_t nibbles = vcombine_u8(vzip1_u8(lo, hi), vzip2_u8(lo, hi));
  return vsubq_s8(vreinterpretq_s8_u8(nibbles), vdupq_n_s8(8));
}

int scalar_q8(const std::uint8_t* row, std::int64_t c) { return static_cast<std::int8_t>(row[c]); }
int scalar_q4(const std::uint8_t* row, std::int64_t c) {
  const unsigned byte = row[c >> 1];
  return static_cast<int>((c & 1) ? (byte >> 4) : (byte & 15u)) - 8;
}

// One row against n tokens: per 128-group a 4-lane partial per 16 columns, folded with the
// group's scale. The same code serves matvec (n = 1), so a token's bits do not depend on n.
constexpr int kMaxTokens = 4;  // tokens sharing one decode of a row's weights

template <class Load16, class Scalar>
void row_grouped(const QuantMatrix& w, std::int64_t r, const float* x, std::int64_t x_stride, int n,
                 float* y, std::int64_t y_stride, Load16 load16, Scalar scalar) {
  const std::uint8_t* row = w.payload + r * w.row_stride;
  const std::int64_t n_groups = (w.cols + w.group - 1) / w.group;
  float32x4_t acc[kMaxTokens];
  float tail_acc[kMaxTokens] = {};
  for (int t = 0; t < n; ++t) acc[t] = vdupq_n_f32(0.0f);
  for (std::int64_t g = 0; g < n_groups; ++g) {
    const std::int64_t begin = g * w.group;
    const std::int64_t end = std::min<std::int64_t>(begin + w.group, w.cols);
    const float scale = fp16_to_f32(load_u16(w.scales, r * n_groups + g));
    float32x4_t part[kMaxTokens];
    for (int t = 0; t < n; ++t) part[t] = vdupq_n_f32(0.0f);
    std::int64_t c = begin;
    for (; c + 16 <= end; c += 16) {
      float32x4_t wf[4];
      widen_s8(load16(row, c), wf);
      for (int t = 0; t < n; ++t) {
        const float* xt = x + t * x_stride + c;
        part[t] = vfmaq_f32(part[t], wf[0], vld1q_f32(xt));
        part[t] = vfmaq_f32(part[t], wf[1], vld1q_f32(xt + 4));
        part[t] = vfmaq_f32(part[t], wf[2], vld1q_f32(xt + 8));
        part[t] = vfmaq_f32(part[t], wf[3], vld1q_f32(xt + 12));
      }
    }
    for (int t = 0; t < n; ++t) {
      const float* xt = x + t * x_stride;
      float tail = 0.0f;
      for (std::int64_t k = c; k < end; ++k) tail += static_cast<float>(scalar(row, k)) * xt[k];
      acc[t] = vfmaq_n_f32(acc[t], part[t], scale);
      tail_acc[t] += scale * tail;
    }
  }
  for (int t = 0; t < n; ++t) y[t * y_stride + r] = vaddvq_f32(acc[t]) + tail_acc[t];
}

void row_f32(const QuantMatrix& w, std::int64_t r, const float* x, std::int64_t x_stride, int n, float* y,
             std::int64_t y_stride) {
  const float* row = reinterpret_cast<const float*>(w.payload + r * w.row_stride);
  for (int t = 0; t < n; ++t) {
    const float* xt = x + t * x_stride;
    float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);
    std::int64_t c = 0;
    for (; c + 8 <= w.cols; c += 8) {
      acc0 = vfmaq_f32(acc0, vld1q_f32(row + c), vld1q_f32(xt + c));
      acc1 = vfmaq_f32(acc1, vld1q_f32(row + c + 4), vld1q_f32(xt + c + 4));
    }
    float sum = vaddvq_f32(vaddq_f32(acc0, acc1));
    for (; c < w.cols; ++c) sum += row[c] * xt[c];
    y[t * y_stride + r] = sum;
  }
}

}  // namespace

void matmul(const QuantMatrix& w, const float* x, std::int64_t x_stride, int n, float* y,
            std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end) {
  if (w.fmt == kFmtQ3G) {  // no NEON unpack of the 3-bit stream yet: the reference per token
    for (int t = 0; t < n; ++t) generic_impl::matvec(w, x + t * x_stride, y + t * y_stride, row_begin, row_end);
    return;
  }
  for (int t0 = 0; t0 < n; t0 += kMaxTokens) {
    const int nt = std::min(kMaxTokens, n - t0);
    const float* xt = x + t0 * x_stride;
    float* yt = y + t0 * y_stride;
    for (std::int64_t r = row_begin; r < row_end; ++r) {
      switch (w.fmt) {
        case kFmtF32: row_f32(w, r, xt, x_stride, nt, yt, y_stride); break;
        case kFmtQ8G: row_grouped(w, r, xt, x_stride, nt, yt, y_stride, q8_load16, scalar_q8); break;
        case kFmtQ4G: row_grouped(w, r, xt, x_stride, nt, yt, y_stride, q4_load16, scalar_q4); break;
        default: std::abort();  // the trunk loader refuses other formats
      }
    }
  }
}

void matvec(const QuantMatrix& w, const float* x, float* y, std::int64_t row_begin, std::int64_t row_end) {
  matmul(w, x, 0, 1, y, 0, row_begin, row_end);
}

void rvq_lut_build(const float* x, const float* const* books, int stages, int entries, int vec_dim,
                   int v_begin, int v_end, float* lut) {
  if (vec_dim != 8 || entries % 4 != 0) {
    generic_impl::rvq_lut_build(x, books, stages, entries, vec_dim, v_begin, v_end, lut);
    return;
  }
  const std::int64_t per_vector = static_cast<std::int64_t>(stages) * entries;
  for (int s = 0; s < stages; ++s) {
    for (int e0 = 0; e0 < entries; e0 += 4) {
      // column[d] lane i = component d of entry e0+i (a 4x8 transpose via de-interleaving loads).
      const float* c = books[s] + static_cast<std::int64_t>(e0) * 8;
      float32x4_t column[8];
      for (int d = 0; d < 8; ++d) {
        column[d] = float32x4_t{c[d], c[8 + d], c[16 + d], c[24 + d]};
      }
      for (int v = v_begin; v < v_end; ++v) {
        const float* xv = x + static_cast<std::int64_t>(v) * 8;
        float32x4_t acc = vdupq_n_f32(0.0f);
        for (int d = 0; d < 8; ++d) acc = vaddq_f32(acc, vmulq_n_f32(column[d], xv[d]));  // generic's order
        vst1q_f32(lut + v * per_vector + static_cast<std::int64_t>(s) * entries + e0, acc);
      }
    }
  }
}

namespace {

// Four rows (r .. r+3 of a 64-row block) at once: lane k is row r+k, summed exactly like generic.
template <int S>
void apply_stages(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin, int row_end) {
  const std::int64_t per_vector = static_cast<std::int64_t>(S) * entries;
  const std::int64_t block_bytes = static_cast<std::int64_t>(m.n_vectors) * kRowBlock * S;
  for (int r0 = row_begin; r0 < row_end; r0 += kRowBlock) {
    const std::uint8_t* block = m.index + static_cast<std::int64_t>(r0 / kRowBlock) * block_bytes;
    const int rows = std::min(kRowBlock, row_end - r0);
    for (int g = 0; g < rows; g += 16) {  // 16 rows = four independent 4-lane chains
      float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
      for (int v = 0; v < m.n_vectors; ++v) {
        const std::uint8_t* runs = block + static_cast<std::int64_t>(v) * kRowBlock * S + g * S;
        const float* lut_v = lut + v * per_vector;
        for (int q = 0; q < 4; ++q) {
          const std::uint8_t* p = runs + q * 4 * S;
          float32x4_t term = float32x4_t{lut_v[p[0]], lut_v[p[S]], lut_v[p[2 * S]], lut_v[p[3 * S]]};
          for (int s = 1; s < S; ++s) {
            const float* t = lut_v + s * entries;
            term = vaddq_f32(term, float32x4_t{t[p[s]], t[p[S + s]], t[p[2 * S + s]], t[p[3 * S + s]]});
          }
          acc[q] = vaddq_f32(acc[q], term);
        }
      }
      for (int q = 0; q < 4; ++q) {
        alignas(16) float lanes[4];
        vst1q_f32(lanes, acc[q]);
        for (int k = 0; k < 4; ++k) {
          const int r = r0 + g + 4 * q + k;
          if (r < row_end) y[r] = lanes[k] * fp16_to_f32(load_u16(m.scales, r));
        }
      }
    }
  }
}

}  // namespace

void rvq_apply(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin, int row_end) {
  assert(row_begin % kRowBlock == 0);
  // Index runs past row_end inside the last block are padding the record holds (blocks are whole),
  // so reading them is safe; their sums are dropped.
  switch (m.stages) {
    case 1: apply_stages<1>(m, lut, entries, y, row_begin, row_end); return;
    case 2: apply_stages<2>(m, lut, entries, y, row_begin, row_end); return;
    case 3: apply_stages<3>(m, lut, entries, y, row_begin, row_end); return;
    default: generic_impl::rvq_apply(m, lut, entries, y, row_begin, row_end); return;
  }
}

void kda_head_step(float* S, const float* q, const float* k, const float* v, const float* g, float beta, int D,
                   float* o) {
  assert(D <= kKdaMaxDim);
  alignas(16) float delta[kKdaMaxDim];
  const int vec_end = D / 4 * 4;
  std::fill(o, o + D, 0.0f);
  for (int i = 0; i < D; ++i) {
    float* row = S + static_cast<std::int64_t>(i) * D;
    const float decay = std::exp(g[i]);
    int j = 0;
    for (; j < vec_end; j += 4) {
      const float32x4_t s = vmulq_n_f32(vld1q_f32(row + j), decay);
      vst1q_f32(row + j, s);
      vst1q_f32(o + j, vfmaq_n_f32(vld1q_f32(o + j), s, k[i]));
    }
    for (; j < D; ++j) {
      row[j] *= decay;
      o[j] += row[j] * k[i];
    }
  }
  for (int j = 0; j < D; ++j) delta[j] = beta * (v[j] - o[j]);
  std::fill(o, o + D, 0.0f);
  for (int i = 0; i < D; ++i) {
    float* row = S + static_cast<std::int64_t>(i) * D;
    int j = 0;
    for (; j < vec_end; j += 4) {
      const float32x4_t s = vfmaq_n_f32(vld1q_f32(row + j), vld1q_f32(delta + j), k[i]);
      vst1q_f32(row + j, s);
      vst1q_f32(o + j, vfmaq_n_f32(vld1q_f32(o + j), s, q[i]));
    }
    for (; j < D; ++j) {
      row[j] += k[i] * delta[j];
      o[j] += row[j] * q[i];
    }
  }
}

}  // namespace waste::kernels::detail::neon_impl

namespace waste::kernels::detail {

const KernelTable& neon_table() {
  namespace impl = neon_impl;
  static const KernelTable table{
      .isa = "neon",
      .matvec = impl::matvec,
      .matmul = impl::matmul,
      .rvq_lut_build = impl::rvq_lut_build,
      .rvq_lut_quantize = generic_impl::rvq_lut_quantize,  // exact integers: nothing to gain
      .rvq_apply = impl::rvq_apply,
      .rvq_apply_vq4p = generic_impl::rvq_apply_vq4p,
      .rvq_lut_to_q16 = generic_impl::rvq_lut_to_q16,
      .rvq_apply_q16 = generic_impl::rvq_apply_q16,
      .rvq_matmul = generic_impl::rvq_matmul,
      .kda_head_step = impl::kda_head_step,
      .vq4p_from_registers = false,
  };
  return table;
}

}  // namespace waste::kernels::detail

#endif  // __aarch64__

#include "compute/model/decode_head.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>

#include "compute/convert/trunk_quant.hpp"
#include "compute/forward/int8_mode.hpp"
#include "compute/kernels/dequantize.hpp"
#include "compute/kernels/int8_matmul.hpp"
#include "shared/fp16.hpp"

namespace waste::model {

namespace {

constexpr auto kFmtQ8G = std::uint8_t(TensorFormat::q8g), kFmtQ4G = std::uint8_t(TensorFormat::q4g);
constexpr int kGroup = kernels::kInt8Group;

// One row's groups into Q6P (int8_matmul.hpp): codes u = q + 32, every group's low nibbles in Q4G's
// order, then every group's high 2 bits: column 2i (+1) at bits 2k of plane 0 (1) byte j, i = 16k + j.
void quantize_q6p(std::span<const float> row, std::uint8_t* payload, std::uint16_t* scales) {
  const std::size_t groups = row.size() / kGroup;
  for (std::size_t g = 0; g < groups; ++g) {
    const float* w = row.data() + g * kGroup;
    std::uint8_t* p = payload + kernels::q6p_low_offset(int(g));
    std::uint8_t* h = payload + kernels::q6p_planes_offset(int(groups), int(g));
    float amax = 0.0f;
    for (int c = 0; c < kGroup; ++c) amax = std::max(amax, std::fabs(w[c]));
    const float s = std::max(amax, 1e-8f) / 31.0f;
    scales[g] = f32_to_fp16(s);
    std::uint8_t u_of[kGroup];
    for (int c = 0; c < kGroup; ++c) {
      // rint(w / s), half to even: |w / s| <= 31.01 < 2^22, so adding and taking off 1.5 * 2^23
      // rounds it as nearbyint does (the default rounding mode), and the loop vectorises.
      const float r = (w[c] / s + 12582912.0f) - 12582912.0f;
      u_of[c] = std::uint8_t(int(std::clamp(r, -32.0f, 31.0f)) + 32);
    }
    for (int i = 0; i < 64; ++i) p[i] = std::uint8_t((u_of[2 * i] & 15) | (u_of[2 * i + 1] & 15) << 4);
    for (int parity = 0; parity < 2; ++parity) {
      for (int j = 0; j < 16; ++j) {
        int bits = 0;
        for (int k = 0; k < 4; ++k) bits |= (u_of[2 * (16 * k + j) + parity] >> 4) << (2 * k);
        h[16 * parity + j] = std::uint8_t(bits);
      }
    }
  }
}

}  // namespace

namespace {
const TrunkTensorInfo* lm_head_info(const Manifest& manifest) {
  for (const TrunkTensorInfo& t : manifest.trunk) {
    if (t.name.ends_with("lm_head.weight")) return &t;
  }
  return nullptr;
}
}  // namespace

forward::HeadMode decode_head_copy(const Manifest& manifest) {
  const forward::HeadMode mode = forward::head_mode();
  if (mode == forward::HeadMode::q8 || !forward::int8_decode_enabled()) return forward::HeadMode::q8;
  const TrunkTensorInfo* t = lm_head_info(manifest);
  if (t == nullptr || t->fmt != TensorFormat::q8g || t->shape.size() != 2 || t->group != kGroup ||
      t->cols() % kGroup != 0) {
    return forward::HeadMode::q8;
  }
  return mode;
}

std::uint64_t decode_head_copy_bytes(const Manifest& manifest) {
  const forward::HeadMode mode = decode_head_copy(manifest);
  if (mode == forward::HeadMode::q8) return 0;
  const TrunkTensorInfo* t = lm_head_info(manifest);
  const std::uint64_t groups = std::uint64_t(t->cols() / kGroup), rows = std::uint64_t(t->rows());
  const std::uint64_t per_group = mode == forward::HeadMode::q6 ? kernels::kQ6PGroupBytes : kGroup / 2;
  return rows * groups * (per_group + 2);
}

Result<DecodeHead> DecodeHead::requantize(const kernels::QuantMatrix& q8, forward::HeadMode mode, ThreadPool& pool) {
  if (mode == forward::HeadMode::q8) {
    return make_error(Errc::argument, "lm_head: the q8 decode head is the stored matrix, not a copy");
  }
  if (q8.fmt != kFmtQ8G || q8.group != kGroup || q8.cols <= 0 || q8.cols % kGroup != 0 || q8.scales == nullptr) {
    return make_error(Errc::format, "lm_head: the decode head's copy needs a Q8G matrix with groups of 128 over "
                                    "whole groups of columns (fmt " + std::to_string(q8.fmt) + ", group " +
                                        std::to_string(q8.group) + ", " + std::to_string(q8.cols) + " columns)");
  }
  const bool q6 = mode == forward::HeadMode::q6;
  DecodeHead h;
  const std::int64_t groups = q8.cols / kGroup;
  const std::int64_t stride = q6 ? groups * kernels::kQ6PGroupBytes : q8.cols / 2;
  h.payload_.resize(std::size_t(q8.rows * stride));
  h.scales_.resize(std::size_t(q8.rows * groups));
  h.matrix_ = kernels::QuantMatrix{h.payload_.data(), h.scales_.data(), q8.rows, q8.cols, stride, kGroup,
                                   q6 ? kernels::kFmtQ6P : kFmtQ4G};
  std::uint8_t* payload = h.payload_.data();
  std::uint16_t* scales = h.scales_.data();
  pool.parallel_for(q8.rows, 256, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> row(std::size_t(q8.cols));
    for (std::int64_t r = begin; r < end; ++r) {
      kernels::dequantize_row(q8, r, row.data());
      if (q6) {
        quantize_q6p(row, payload + r * stride, scales + r * groups);
      } else {
        convert::quantize_row(TensorFormat::q4g, row,
                              std::as_writable_bytes(std::span(payload + r * stride, std::size_t(stride))),
                              std::span(scales + r * groups, std::size_t(groups)));
      }
    }
  });
  return h;
}

}  // namespace waste::model

// Trunk placement and quantisation (reference §1.5, §8): F32 for 1-D tensors and tensors under
// 65 536 elements, Q8G for embed_tokens, lm_head and GLM's mHC projections (`.hc_*_fn`), Q4G (or Q8G with --trunk-bits 8) for every
// other matrix. Per group of 128 inputs: s = max(amax, 1e-8) / qmax in f32, q = clamp(rint(w/s)),
// fp16(s) stored; the row is zero-padded to whole groups.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "shared/container/manifest.hpp"

namespace waste::convert {

inline constexpr std::int64_t kSmallTensorElements = 65536;

TensorFormat trunk_format(std::string_view name, const std::vector<std::int64_t>& shape, int trunk_bits);

// One row of `cols` floats into a payload of row_stride bytes and n_groups fp16 scales.
void quantize_row(TensorFormat fmt, std::span<const float> row, std::span<std::byte> payload,
                  std::span<std::uint16_t> scales);

}  // namespace waste::convert

// Exact decoders from the checkpoint dtypes to f32 (deepseek-and-weight-formats.md §5, §6, §8):
// F32, F16, BF16, F8_E4M3 (FN: no inf, 0x7F/0xFF NaN) and F8_E5M2 (IEEE-like) with a
// `weight_scale_inv` F32 block-scale companion, and MXFP4 pairs (`weight_packed` U8 E2M1 nibbles,
// low nibble first, + `weight_scale` U8 E8M0 per 32 inputs). Every value is exact in f32.
//
// DeepSeek-V4.1's release (model-families.md §2.1): `X.weight` F8_E4M3 with `X.scale` UE8M0
// (F8_E8M0 or U8) block scales (32x32 from quantization_config.weight_block_size), and routed
// experts as `X.weight` I8 [M, N/2] (two E2M1 per byte, low nibble first) with `X.scale` UE8M0
// [M, N/32]: MXFP4 under other names.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "compute/convert/safetensors.hpp"
#include "shared/result.hpp"

namespace waste::convert {

float f16_to_f32_ieee(std::uint16_t h) noexcept;   // inf and NaN kept (unlike the trunk decode)
float bf16_to_f32(std::uint16_t h) noexcept;
float f8_e4m3fn_to_f32(std::uint8_t b) noexcept;
float f8_e5m2_to_f32(std::uint8_t b) noexcept;
float e2m1_to_f32(std::uint8_t nibble) noexcept;   // low 4 bits used
float e8m0_to_f32(std::uint8_t e) noexcept;        // 2^(e-127); 0xFF is NaN; 0 is 2^-127 (OCP MX)

enum class WeightEncoding : std::uint8_t { plain, fp8_block, mxfp4 };

// One logical 2-D (or 1-D..4-D for plain) weight, with its companions resolved and checked.
struct WeightSource {
  std::string name;                 // logical name, e.g. "...experts.3.w1.weight"
  std::string shard;                // for errors
  WeightEncoding encoding = WeightEncoding::plain;
  Dtype dtype = Dtype::f32;         // of the main tensor
  std::vector<std::int64_t> shape;  // logical shape (MXFP4: columns = 2 x packed bytes)
  std::span<const std::byte> data;
  std::span<const std::byte> scales;  // fp8: F32 or UE8M0 [ceil(M/br), ceil(N/bc)]; mxfp4: U8 [M, N/32]
  bool ue8m0_scales = false;          // fp8: one-byte power-of-two scales (`.scale`), not F32
  int block_rows = 0, block_cols = 0; // fp8 block size (quantization_config.weight_block_size)
  [[nodiscard]] std::int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
  [[nodiscard]] std::int64_t rows() const;
};

struct BlockSize {
  int rows = 0, cols = 0;  // 0 = not declared by the config
};

// Resolve `name` (a ".weight" or any plain tensor) in the checkpoint: the tensor itself
// (F32/F16/BF16, or F8 with `name + "_scale_inv"` F32 or `<base>.scale` UE8M0), the MXFP4 pair
// `<base>.weight_packed` + `<base>.weight_scale`, or I8 packed E2M1 with `<base>.scale`. Errors
// name the tensor and its shard. fp8_block {1, 32} reads per-row scales (the Engram tables).
Result<WeightSource> resolve_weight(const Checkpoint& checkpoint, const std::string& name, BlockSize fp8_block);

// Rows [row0, row0 + n_rows) of the weight (flattened to rows x cols) into `out`, row-major.
Status decode_rows(const WeightSource& w, std::int64_t row0, std::int64_t n_rows, std::span<float> out);

}  // namespace waste::convert

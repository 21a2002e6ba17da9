// The lm_head's copy for decode rows (forward/head_mode.hpp: q6, q4): made once at open from the
// stored Q8G matrix, row by row: a row's 128-column groups dequantised exactly (q * fp16 scale),
// then quantised again per group with s = max(max |w|, 1e-8) / qmax in f32, q = clamp(rint(w / s),
// -qmax - 1, qmax), fp16(s) stored (the converter's rule, compute/convert/trunk_quant.cpp):
// - q4: Q4G (qmax 7), the converter's own quantize_row; 4.125 bits a weight.
// - q6: Q6P (qmax 31; kernels/int8_matmul.hpp: codes q + 32, low nibbles then two high-bit
//   planes per group), a run-time layout the int8 product reads; 6.125 bits a weight.
#pragma once

#include <cstdint>
#include <vector>

#include "compute/forward/head_mode.hpp"
#include "compute/kernels/kernels.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "shared/container/manifest.hpp"
#include "shared/result.hpp"

namespace waste::model {

// The copy Engine::open makes for this manifest under this process's settings: head_mode() when it
// is not q8, decode rows take the int8 product (forward::int8_decode_enabled) and lm_head is a Q8G
// matrix with groups of 128 over whole groups of columns; else q8 (no copy).
forward::HeadMode decode_head_copy(const Manifest& manifest);
// What that copy holds in bytes (0 without one): what the engine asks its budget for beside its
// state and scratch.
std::uint64_t decode_head_copy_bytes(const Manifest& manifest);

class DecodeHead {
 public:
  // From a Q8G matrix with groups of 128 and whole groups of columns (what every v0 lm_head is), in
  // `mode`'s format (q6 or q4); rows split over `pool` (the same bytes for any split). Errors
  // (Errc::format): "lm_head: the decode head's copy needs a Q8G matrix with groups of 128 over
  // whole groups of columns (fmt F, group G, N columns)"; (Errc::argument) for mode q8.
  static Result<DecodeHead> requantize(const kernels::QuantMatrix& q8, forward::HeadMode mode, ThreadPool& pool);

  DecodeHead(DecodeHead&&) noexcept = default;
  DecodeHead& operator=(DecodeHead&&) noexcept = default;
  DecodeHead(const DecodeHead&) = delete;
  DecodeHead& operator=(const DecodeHead&) = delete;

  // The copy's view; valid while this object lives, moves included.
  [[nodiscard]] const kernels::QuantMatrix& matrix() const { return matrix_; }
  [[nodiscard]] std::uint64_t bytes() const { return payload_.size() + 2 * scales_.size(); }

 private:
  DecodeHead() = default;
  std::vector<std::uint8_t> payload_;   // rows x row_stride (a move keeps the buffers)
  std::vector<std::uint16_t> scales_;   // rows x cols / 128 fp16
  kernels::QuantMatrix matrix_{};
};

}  // namespace waste::model

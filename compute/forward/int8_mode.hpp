// Whether prompt chunks take the int8 trunk product (compute/kernels/int8_matmul.hpp): opt-in with
// WASTE_PREFILL_INT8=on (read on first use). Only calls of at least kInt8MinTokens tokens on Q4G matrices
// take it, so decode steps and small serve batches keep the f32 bits; a prompt's bits then depend on
// how it was chunked (a bounded path: docs/QUALITY.md).
#pragma once

#include <cstdint>

#include "compute/kernels/int8_matmul.hpp"

namespace waste::forward {

inline constexpr int kInt8MinTokens = 16;

bool int8_prefill_enabled();
// Overrides the environment for this process (tests, A/B runs).
void set_int8_prefill(bool on);
// x (n tokens, x_stride apart, cols columns) quantised into the calling thread's buffer, returned by
// reference: capture the reference in a parallel_for lambda, never the buffer's name (a worker
// would see its own, empty one).
const kernels::Int8Acts& quantized_input(const float* x, std::int64_t x_stride, int n, std::int64_t cols);

}  // namespace waste::forward

// Whether prompt chunks take the int8 trunk product (compute/kernels/int8_matmul.hpp): opt-in with
// WASTE_PREFILL_INT8=on (read on first use). Only calls of at least kInt8MinTokens tokens on Q4G matrices
// take it, so decode steps and small serve batches keep the f32 bits; a prompt's bits then depend on
// how it was chunked (a bounded path: docs/QUALITY.md).
#pragma once

namespace waste::forward {

inline constexpr int kInt8MinTokens = 16;

bool int8_prefill_enabled();
// Overrides the environment for this process (tests, A/B runs).
void set_int8_prefill(bool on);

}  // namespace waste::forward

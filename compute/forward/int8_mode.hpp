// Whether prompt tokens take the int8 trunk product (compute/kernels/int8_matmul.hpp): on by
// default, WASTE_PREFILL_INT8=off (read on first use) or set_int8_prefill() for the f32 path.
//
// The per-token rule, as for the experts (expert_batch.hpp): during a forward pass every trunk
// projection on Q4G matrices multiplies the rows of prompt tokens (Exec::prompt_rows) by int8
// products and the rows of decode steps by the f32 kernels. The int8 kernels give a token the same
// bits whatever other tokens share the call, so a prompt token's bits depend on its kind alone:
// not on how the prompt is chunked, nor on the other sequences of a batch, nor on the thread
// count. Decode steps keep the f32 bits unless the decode rule below is on (its default on AVX-512
// VNNI). The bound to the f32 path: docs/QUALITY.md.
#pragma once

#include <cstdint>
#include <string_view>

#include "compute/kernels/int8_matmul.hpp"
#include "shared/container/manifest.hpp"
#include "shared/result.hpp"

namespace waste::forward {

bool int8_prefill_enabled();
// Overrides the environment for this process (tests, A/B runs).
void set_int8_prefill(bool on);

// Whether decode steps take the int8 trunk product too (the same contract and bound as prompt
// tokens, through the few-token kernel). WASTE_DECODE_INT8=on|off (read on first use); unset, on
// where matmul_i8 is the vector kernel (AVX-512 VNNI), off elsewhere (the scalar reference is slower
// than the f32 kernels). With both rules on, every row of a call on a Q4G matrix takes int8.
bool int8_decode_enabled();
void set_int8_decode(bool on);
// Whether a row of this kind (Exec::prompt_rows: 1 prompt token, 0 decode step) takes int8.
bool int8_for_kind(unsigned char kind);
// "on"/"1" -> true, "off"/"0" -> false; anything else an error naming `what` and the text.
Result<bool> parse_int8_prefill(std::string_view text, std::string_view what);
// Whether a model with this manifest has layer matrices the int8 product takes (Q4G, groups of
// 128): with the rule on, its prompt tokens then get other bits than its decode steps.
bool has_int8_matrices(const Manifest& manifest);
// The rules cover the layers' projections on Q4G matrices (a `--trunk8` container's Q8G layers
// keep f32: on a CPU without VNNI the prompt rule would take them to the scalar reference).
bool takes_int8_rules(const kernels::QuantMatrix& w);
// The lm_head (Q8G in every v0 container) takes the int8 product for decode steps under the
// decode rule, so a batch of decode steps reads the matrix once at the product's speed rather than
// the f32 kernel's (compute-bound past one token); a prompt's logits keep f32 under either rule.
// Whether this manifest's lm_head is one the product takes.
bool has_int8_head(const Manifest& manifest);
// x (n tokens, x_stride apart, cols columns) quantised into the calling thread's buffer, returned by
// reference: capture the reference in a parallel_for lambda, never the buffer's name (a worker
// would see its own, empty one).
const kernels::Int8Acts& quantized_input(const float* x, std::int64_t x_stride, int n, std::int64_t cols);

}  // namespace waste::forward

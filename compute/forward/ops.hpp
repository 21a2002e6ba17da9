// Small building blocks of the forward pass: the thread pool + kernel table bundle, the
// row-parallel trunk matvec, RMSNorm, activations. Everything here is allocation-free and
// deterministic for any thread count (work is split by output rows only).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "compute/kernels/kernels.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "shared/container/model_config.hpp"

namespace waste::forward {

// What every forward routine needs to run kernels: the pool and the dispatched table.
struct Exec {
  ThreadPool& pool;
  const kernels::KernelTable& kernels;
  // During a forward pass's layer loop, one flag per token row of the pass: a prompt token (1) or
  // a decode step (0); empty elsewhere. matvec_tokens over the pass's rows gives prompt rows the
  // int8 product (int8_mode.hpp, the per-token rule).
  std::span<const unsigned char> prompt_rows = {};
};

inline constexpr std::int64_t kMatvecMinRows = 64;

// y = W x over all rows, split across the pool by rows; always the f32 kernels (a projection that
// takes the int8 rules goes through matvec_tokens, n = 1 in a decode step).
void matvec(const Exec& exec, const kernels::QuantMatrix& w, const float* x, float* y);

// y_t = W x_t for n tokens (x_t = x + t*x_stride, y_t = y + t*y_stride): one kernel matmul per
// row chunk, which decodes each weight once per tile of tokens. The table's matmul gives token t
// the bits its matvec gives x_t, so this equals n matvec calls bit for bit. Except: under the int8
// rules (int8_mode.hpp) the rows int8_rows names take the int8 product on a Q4G matrix, each row
// the bits it gets alone.
void matvec_tokens(const Exec& exec, const kernels::QuantMatrix& w, const float* x, std::int64_t x_stride, int n,
                   float* y, std::int64_t y_stride);
// The lm_head of kinds.size() rows (kinds as Exec::prompt_rows: 1 a prompt token, 0 a decode
// step): under the decode rule the decode rows take the int8 product (takes_int8_rules' exception,
// int8_mode.hpp), the others the f32 kernels; each row the bits it gets alone. Decode rows read
// `w_decode` (ModelWeights::decode_head(): w itself, or its copy under head_mode.hpp's q6 or q4).
void head_tokens(const Exec& exec, const kernels::QuantMatrix& w, const kernels::QuantMatrix& w_decode, const float* x,
                 std::int64_t x_stride, std::span<const unsigned char> kinds, float* y, std::int64_t y_stride);
// Which rows of a call of n rows take the int8 product under the rules (the matrix must still be one
// int8_matmul_supports takes): over the pass's rows (n == exec.prompt_rows.size()) each row by its
// kind (int8_for_kind); outside a pass (no flags: a decode step) by the decode rule; any other call
// inside a pass none.
enum class Int8Rows { none, all, mixed };
Int8Rows int8_rows(const Exec& exec, int n);

// out = x * (mean(x^2) + eps)^-1/2 * w; out may alias x.
void rms_norm(const float* x, const float* w, int n, float eps, float* out);
// As rms_norm, without the weight (AttnRes scores use the normalised value times two vectors).
float rms_inverse(const float* x, int n, float eps);

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// softplus(z) = z for z > 20 (exp would only add rounding), else log1p(exp z).
inline float softplus(float z) { return z > 20.0f ? z : std::log1p(std::exp(z)); }

// The gated FFN activation, SiLU(a)*b or SiTU(a, b) (§3.8); out may alias a or b. With
// swiglu_limit > 0 (GLM) a is clamped above at the limit and b to [-limit, limit] first.
void ffn_activation(const ModelConfig& config, const float* a, const float* b, int n, float* out);

// Row `row` of a trunk matrix dequantised to f32 (cols floats), the same values matvec uses.
void dequantize_row(const kernels::QuantMatrix& w, std::int64_t row, float* out);

}  // namespace waste::forward

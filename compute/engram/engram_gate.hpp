// The Engram forward half for one token at one Engram layer (DeepSeek-V4.1-Flash, layers 1 and
// 14; transformers deepseek_v41 DeepseekV41Engram), run on the mHC streams before the layer's
// attention site. Given the token's gathered rows (rows_per_token of row_dim floats, in the
// order sequence_row_ids gives them: n-gram size 2's heads, then 3's, then 4's):
//   flat  = the rows end to end                          (24 x 256 = 6144 released)
//   kv    = wkv . flat;  key[k] = kv[k*hidden ...], value = kv[hc*hidden ...]  (k < hc)
//   dot_k = sum_d h_k[d] * qk[k][d] * key_k[d] * rstd(h_k) * rstd(key_k) / sqrt(hidden)
//           rstd(v) = (mean(v^2) + eps)^-1/2, per stream over hidden (not over all streams);
//           eps = rms_norm_eps (1e-20 released); qk = q_weight * k_weight (a product only)
//   gate_k = sigmoid(sign(dot_k) sqrt(max(|dot_k|, 1e-6)))
//   h_k  += gate_k * value
// A token inside an image span (live = false) has gate 0: its streams are left as they are.
#pragma once

#include <span>
#include <vector>

#include "compute/forward/ops.hpp"
#include "compute/kernels/kernels.hpp"
#include "shared/result.hpp"

namespace waste::engram {

inline constexpr float kEngramGateFloor = 1e-6f;  // |dot| floor before the signed sqrt

struct EngramGateShape {
  int hc = 0;              // hc_mult (4)
  int hidden = 0;          // hidden_size (5120)
  int rows = 0;            // rows per token: (engram_max_ngram_size - 1) * engram_n_heads (24)
  int row_dim = 0;         // engram_head_dim (256)
  float eps = 1e-20f;      // rms_norm_eps

  // Checks every dimension positive and hc <= 16: "engram gate: hidden 0 is not positive".
  static Result<EngramGateShape> make(int hc, int hidden, int rows, int row_dim, float eps);
  [[nodiscard]] int in_dim() const { return rows * row_dim; }
  [[nodiscard]] int out_dim() const { return (hc + 1) * hidden; }
};

struct EngramGateWeights {
  kernels::QuantMatrix wkv{};   // [(hc + 1) * hidden][rows * row_dim]
  std::vector<float> qk;        // [hc][hidden]: q_weight * k_weight, folded once

  // qk from the two checkpoint vectors (each [hc][hidden]), multiplied in f32 as the reference
  // does; checks wkv's shape against `shape`, errors naming the tensor and both shapes.
  static Result<EngramGateWeights> bind(const EngramGateShape& shape, const kernels::QuantMatrix& wkv,
                                        std::span<const float> q_weight, std::span<const float> k_weight);
};

struct EngramGateScratch {
  std::vector<float> kv;   // [(hc + 1) * hidden]
  void resize(const EngramGateShape& shape) { kv.resize(std::size_t(shape.out_dim())); }
};

// streams [hc][hidden] updated in place; rows [rows * row_dim] the token's dequantized rows
// (not read when !live). gates [hc], if not null, receives the gates (0 when !live).
void engram_gate_apply(const forward::Exec& exec, const EngramGateShape& shape, const EngramGateWeights& w,
                       const float* rows, bool live, float* streams, EngramGateScratch& s, float* gates = nullptr);

}  // namespace waste::engram

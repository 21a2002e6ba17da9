// ModelWeights: every trunk tensor the Kimi-Linear / K3 forward pass touches, resolved by name
// and shape-checked once at load (waste-v0-reference.md §3.2). Matrices stay quantised inside
// the trunk image and are handed to the kernels as QuantMatrix views; small F32 vectors (norms,
// conv taps, A_log, dt_bias, biases) are copied out so the hot path reads plain floats.
// Lifetime: the QuantMatrix views point into the Trunk's image, which must outlive this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compute/kernels/kernels.hpp"
#include "shared/container/model_config.hpp"
#include "shared/container/trunk.hpp"
#include "shared/result.hpp"

namespace waste::model {

using kernels::QuantMatrix;

// Sub-view of rows [row_begin, row_begin + n_rows) of a matrix (MLA per-head kv_b slices).
QuantMatrix row_slice(const QuantMatrix& m, std::int64_t row_begin, std::int64_t n_rows);

// H = kda_heads, D = kda_dim, C = H*D, K = conv_k.
struct KdaWeights {
  QuantMatrix q_proj, k_proj, v_proj;   // [C, hid]
  std::vector<float> q_conv, k_conv, v_conv;  // [C][K] depthwise taps, tap K-1 = newest sample
  QuantMatrix f_a;                       // [D, hid]
  QuantMatrix f_b;                       // [C, D]
  QuantMatrix b_proj;                    // [H, hid]
  std::vector<float> a_log;              // [H] (first H entries; K3 pads the tensor to 128)
  std::vector<float> dt_bias;            // [C]
  QuantMatrix g_a, g_b;                  // [D, hid], [C, D]   (Kimi-Linear low-rank output gate)
  QuantMatrix g_proj;                    // [C, hid]           (K3 full-rank output gate)
  std::vector<float> o_norm;             // [D]
  QuantMatrix o_proj;                    // [hid, C]
};

// GLM's k-pool DSA indexer of one MLA layer (HF names under self_attn.indexer.; the maths and
// shapes: compute/forward/kpool_indexer.hpp, whose KpoolIndexerWeights Forward fills from these).
struct IndexerWeights {
  QuantMatrix wq_b;                      // wq_b.weight                [ih*id, q_lora]
  QuantMatrix wk;                        // wk.weight                  [id, hid]
  std::vector<float> k_norm_w, k_norm_b; // k_norm.weight, k_norm.bias [id]
  QuantMatrix weights_proj;              // weights_proj.weight        [ih, hid]
  QuantMatrix compress_gate;             // index_kpool_compress_gate  [id, hid]
  std::vector<float> compress_ape;       // index_kpool_compress_ape   [kpool, id]
};

// nh = n_heads, qd = qk_nope + qk_rope.
struct MlaWeights {
  QuantMatrix q_proj;                    // [nh*qd, hid]          (q_lora == 0)
  QuantMatrix q_a;                       // [q_lora, hid]         (q_lora > 0)
  std::vector<float> q_a_norm;           // [q_lora]
  QuantMatrix q_b;                       // [nh*qd, q_lora]
  QuantMatrix kv_a;                      // [kv_lora + rope, hid]
  std::vector<float> kv_a_norm;          // [kv_lora]
  QuantMatrix kv_b;                      // [nh*(nope+v), kv_lora]: per head nope K rows, then v V rows
  QuantMatrix g_proj;                    // [nh*v, hid]           (K3 output gate)
  QuantMatrix o_proj;                    // [hid, nh*v]
  IndexerWeights indexer;                // bound only with index_n_heads > 0
};

struct FfnWeights {
  QuantMatrix gate;                      // [inter, in]
  QuantMatrix up;                        // [inter, in]
  QuantMatrix down;                      // [in, inter]
};

struct MoeWeights {
  QuantMatrix router;                    // [E, hid]
  std::vector<float> score_bias;         // [E] e_score_correction_bias; empty = none (selection only)
  bool has_shared = false;
  FfnWeights shared;                     // width moe_inter * max(n_shared, 1), on the full hidden
  QuantMatrix latent_down;               // [lat, hid]  (K3 latent MoE)
  QuantMatrix latent_up;                 // [hid, lat]
  std::vector<float> latent_norm;        // [lat]       (latent_moe_use_norm)
};

// One mHC site (GLM; attention or FFN): mix = fn . rms(streams flattened), then pre, post and
// comb from mix * scale + base (compute/forward/mhc.hpp). hc = hc_mult, mix = (2 + hc) * hc.
struct MhcWeights {
  QuantMatrix fn;                        // [mix, hc*hid] (Q8G in containers)
  std::vector<float> base;               // [mix]
  std::vector<float> scale;              // [3]: pre, post, comb
};

struct LayerWeights {
  int index = 0;
  bool kda = false;                      // else MLA
  bool moe = false;                      // else dense FFN
  std::vector<float> input_norm;         // [hid]
  std::vector<float> post_norm;          // [hid]
  // Attention Residuals (K3), each [hid]; empty without AttnRes.
  std::vector<float> attn_res_norm, attn_res_proj, mlp_res_norm, mlp_res_proj;
  // mHC (GLM) around the attention and the FFN; unbound without hc_mult.
  MhcWeights attn_hc, ffn_hc;
  KdaWeights kda_w;
  MlaWeights mla_w;
  FfnWeights dense;
  MoeWeights moe_w;
};

struct ModelWeights {
  const TrunkTensor* embed = nullptr;    // [vocab, hid], usually on disk: one row read per token
  std::vector<float> final_norm;         // [hid]
  QuantMatrix lm_head;                   // [vocab, hid]
  std::vector<float> out_res_norm, out_res_proj;  // [hid] (K3 output AttnRes)
  std::vector<LayerWeights> layers;

  // Errors: "tensor NAME: missing", "tensor NAME: expected shape [a, b], found [c, d]".
  static Result<ModelWeights> bind(const ModelConfig& config, const Trunk& trunk);
};

}  // namespace waste::model

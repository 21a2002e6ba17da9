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

// DeepSeek-V4.1's CSA2 attention of one layer (names under self_attn.; shapes in
// shared/container/v41_tensors.hpp, maths in compute/forward/csa2.hpp, whose Csa2Weights the
// Forward fills from these). Only what the layer's role uses is bound.
struct Csa2LayerWeights {
  QuantMatrix wq_a, wq_b, wkv, wo_a, wo_b;        // [q_lora, hid], [nh*hd, q_lora], [hd, hid], ...
  std::vector<float> q_norm, kv_norm, attn_sink;  // [q_lora], [hd], [nh]
  QuantMatrix c_wkv, c_wgate;                     // compressor.wkv / .wgate (KV sources; wgate at ratio > 1)
  std::vector<float> c_norm;                      // compressor.norm [hd]
  QuantMatrix i_wq_b, i_weights_proj;             // indexer.wq_b / .weights_proj (index sources)
  QuantMatrix i_wk;                               // indexer.wk [id, hd] (KV sources, with any index source)
  std::vector<float> i_k_norm;                    // indexer.k_norm [id]
};

// DeepSeek-V4.1's Engram gate tensors of one engram layer (bound only; compute/engram's
// EngramGateWeights::bind takes them): wkv [(hc+1)*hid, (max_ngram-1)*n_heads*head_dim],
// q_weight and k_weight [hc][hid] (F32).
struct EngramWeights {
  QuantMatrix wkv;
  std::vector<float> q_weight, k_weight;
};

struct FfnWeights {
  QuantMatrix gate;                      // [inter, in]
  QuantMatrix up;                        // [inter, in]
  QuantMatrix down;                      // [in, inter]
};

struct MoeWeights {
  QuantMatrix router;                    // [E, hid]
  std::vector<float> score_bias;         // [E] e_score_correction_bias; empty = none (selection only)
  std::vector<float> bias_vl;            // [E] DeepSeek-V4.1's image-span bias (gate.bias_vl); empty = none
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
  bool kda = false;                      // else MLA (or CSA2 with csa)
  bool csa = false;                      // DeepSeek-V4.1's CSA2 attention (csa_w)
  bool engram = false;                   // an Engram layer (engram_w bound)
  bool moe = false;                      // else dense FFN
  std::vector<float> input_norm;         // [hid]
  std::vector<float> post_norm;          // [hid]
  // Attention Residuals (K3), each [hid]; empty without AttnRes.
  std::vector<float> attn_res_norm, attn_res_proj, mlp_res_norm, mlp_res_proj;
  // mHC (GLM) around the attention and the FFN; unbound without hc_mult.
  MhcWeights attn_hc, ffn_hc;
  KdaWeights kda_w;
  MlaWeights mla_w;
  Csa2LayerWeights csa_w;
  EngramWeights engram_w;
  FfnWeights dense;
  MoeWeights moe_w;
};

struct ModelWeights {
  const TrunkTensor* embed = nullptr;    // [vocab, hid], usually on disk: one row read per token
  std::vector<float> final_norm;         // [hid]
  QuantMatrix lm_head;                   // [vocab, hid]
  // Decode rows' head when it is not lm_head itself: the Q6P or Q4G copy Engine::open makes under
  // forward::HeadMode q6 or q4 (compute/model/decode_head.hpp); payload nullptr otherwise.
  QuantMatrix lm_head_decode{};
  [[nodiscard]] const QuantMatrix& decode_head() const {
    return lm_head_decode.payload != nullptr ? lm_head_decode : lm_head;
  }
  std::vector<float> out_res_norm, out_res_proj;  // [hid] (K3 output AttnRes)
  std::vector<LayerWeights> layers;

  // Errors: "tensor NAME: missing", "tensor NAME: expected shape [a, b], found [c, d]". A
  // deepseek-v4.1 config is checked against shared/container/v41_tensors.hpp's list first.
  static Result<ModelWeights> bind(const ModelConfig& config, const Trunk& trunk);
};

}  // namespace waste::model

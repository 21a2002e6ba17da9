// The size of every buffer one compute client allocates for a model: its RunState (the
// sequence state) and the forward pass's scratch (decode, LUT and chunked-prefill buffers,
// the logits). One function, from the validated ModelConfig and ExpertGeometry: the allocators
// (compute/model/run_state.cpp, compute/forward/*) take their element counts from it and the
// memory plan sums it, so the plan cannot drift from what an engine really holds.
// Counts are elements of the buffer's own type (float, int, int8, byte), not bytes.
#pragma once

#include <cstdint>

#include "shared/container/expert_record.hpp"
#include "shared/container/model_config.hpp"

namespace waste::sizing {

inline constexpr int kPrefillChunk = 64;   // default tokens per chunked-prefill pass (EngineOptions::prefill_chunk)
inline constexpr int kMaxPrefillChunk = 512;  // most tokens one pass may carry (forward::kMaxPrefillChunk)
// Gate/up LUT rows of a pass (forward::kLutRows): tokens whose experts take the LUT path at once
// (decode tokens under the per-token rule; every token under the count rule, "off" or VQ4P). A
// pass with more such tokens runs its MoE in groups of this many tokens (moe_prefill.cpp).
inline constexpr int kLutRows = 64;
// Tokens of one VQ4P expert applied together in a prefill pass (forward::run_expert_tokens): each
// matrix's index is read once per group; the group's activations and down LUTs are its scratch.
inline constexpr int kVq4pGroupTokens = 8;
// Tokens the chunk buffers of a client with prefill chunk `chunk` hold: never fewer than the
// default chunk (a pass of up to 64 tokens always fits, as before chunks above 64 existed).
constexpr int prefill_capacity(int chunk) { return chunk > kPrefillChunk ? chunk : kPrefillChunk; }
inline constexpr int kMaxLookahead = 64;   // lookahead ids per MoE layer (forward::kMaxLookahead)
inline constexpr int kLutQuantBlock = 32;  // VQ4P int8 LUT block (kernels::kLutQuantBlock)

constexpr std::uint64_t lut_quant_blocks(std::uint64_t n_vectors) {
  return (n_vectors + kLutQuantBlock - 1) / kLutQuantBlock;
}

// model::RunState (floats).
struct StateSizes {
  int n_kda_layers = 0, n_mla_layers = 0;
  std::uint64_t kda_state = 0;   // per KDA layer: H x D x D
  std::uint64_t conv_ring = 0;   // per ring (3 per KDA layer): C x (K-1)
  std::uint64_t latent = 0;      // per MLA layer: ctx x (kv_lora + rope)
  // per MLA layer with GLM's DSA indexer: (ctx / kpool + 2 kpool) x index_head_dim (pooled keys,
  // then the k and gate rows of the pool being filled; forward::KpoolIndexerState::bytes)
  std::uint64_t index_state = 0;
  // DeepSeek-V4.1's CSA2 (forward::Csa2Window / Csa2Source::bytes): per CSA2 layer a window
  // ring of sliding_window x head_dim; over all KV-source layers, (ctx / ratio) groups of
  // head_dim (+ index_head_dim with any index source) plus 2 x ratio x head_dim of the group
  // being filled.
  int n_csa_layers = 0;
  std::uint64_t csa_window = 0;  // per CSA2 layer
  std::uint64_t csa_sources = 0; // all KV sources together
  int max_blocks = 0;            // AttnRes history depth (0 = no AttnRes)
  std::uint64_t blocks = 0;      // max_blocks x hidden
  std::uint64_t hidden = 0;      // the last token's residual stream: hc_mult x hidden under mHC
  [[nodiscard]] std::uint64_t bytes() const;
};

// forward::MlaScratch for `tokens` tokens (floats); all zero without MLA layers.
struct MlaSizes {
  std::uint64_t q = 0, q_a = 0, ckv = 0, q_tilde = 0, ctx_sum = 0, scores = 0, dot_r = 0, o = 0, gate = 0;
  // GLM's DSA indexer (forward::KpoolIndexerScratch::bytes): 4-byte floats and ints, one set
  // shared by every indexed MLA layer; 0 without the indexer.
  std::uint64_t indexer = 0;
  [[nodiscard]] std::uint64_t bytes() const;
};

// forward::KdaScratch for `tokens` tokens (floats); all zero without KDA layers.
struct KdaSizes {
  std::uint64_t channels = 0;    // q, k, v, g, gate, o each: T x C
  std::uint64_t low = 0;         // T x D
  std::uint64_t beta = 0;        // T x H
  [[nodiscard]] std::uint64_t bytes() const;
};

// forward::MoeScratch (decode).
struct MoeSizes {
  std::uint64_t experts = 0;     // router, probs, scored, la_router, la_scored (float); taken, la_taken (byte)
  std::uint64_t top_k = 0;       // ids (int), weights (float)
  std::uint64_t lat = 0;         // xin, y, ysum (float)
  std::uint64_t la_ids = 0;      // int
  std::uint64_t lut_in = 0;      // lut_gate, lut_up (float); lutq_gate, lutq_up (int8) when VQ4P
  std::uint64_t lut_down = 0;    // lut_down (float); lutq_down (int8) when VQ4P
  std::uint64_t lutq_in = 0, lutq_down = 0;            // 0 unless VQ4P
  std::uint64_t lut_scales_in = 0, lut_scales_down = 0; // VQ4P block scales (float)
  std::uint64_t inter = 0;       // a, b (float)
  std::uint64_t ys = 0;          // top_k x lat (float)
  std::uint64_t routed = 0;      // hidden (float)
  [[nodiscard]] std::uint64_t bytes() const;
};

// forward::PrefillMoeScratch for `tokens` tokens.
struct PrefillMoeSizes {
  std::uint64_t routes = 0;      // ids (int), weights (float), users (int): T x top_k
  std::uint64_t xin = 0;         // T x lat (K3 latent only)
  std::uint64_t lut_rows = 0;    // min(T, kLutRows): tokens on the LUT path at once
  std::uint64_t lut_slots = 0;   // lut_slot (int): T, each token's LUT row (-1: none)
  std::uint64_t lut = 0;         // lut_gate, lut_up (float): lut_rows x lut floats
  std::uint64_t lutq = 0;        // lutq_gate, lutq_up (int8), VQ4P only
  std::uint64_t lut_scales = 0;  // lutq_scale_gate, lutq_scale_up (float), VQ4P only
  std::uint64_t ys = 0;          // T x top_k x lat
  std::uint64_t experts = 0;     // distinct (int, reserved), fill (int)
  std::uint64_t user_begin = 0;  // E + 1 (int)
  std::uint64_t router = 0;      // T x E
  std::uint64_t ysum = 0;        // T x lat
  std::uint64_t routed = 0;      // T x hidden (K3 latent only)
  std::uint64_t ffn = 0;         // fa, fb: T x max(shared, dense inter, 1)
  std::uint64_t matmul_lat = 0;  // prefill by matrix products: inputs, outputs (float): T x lat
  std::uint64_t matmul_inter = 0;  // its gate and up rows (float): T x moe inter (0 for VQ4P: LUT path)
  // VQ4P only: one expert's group of up to kVq4pGroupTokens tokens (group_rows = min(T, that)).
  std::uint64_t group_rows = 0;
  std::uint64_t group_inter = 0;       // group_a, group_b (float): group_rows x moe inter
  std::uint64_t group_lut = 0;         // group_lut_down (float): group_rows x down LUT floats
  std::uint64_t group_lutq = 0;        // group_lutq_down (int8): as many
  std::uint64_t group_lut_scales = 0;  // group_lutq_scale_down (float): group_rows x down LUT blocks
  [[nodiscard]] std::uint64_t bytes() const;
};

// forward::Forward's own vectors.
struct ForwardSizes {
  std::uint64_t hidden = 0;      // ps, h, a, f (float)
  std::uint64_t stream = 0;      // x: the residual stream, hc_mult x hidden under mHC (float)
  std::uint64_t ffn = 0;         // ffn_a, ffn_b (float)
  std::uint64_t res_scores = 0;  // float
  std::uint64_t res_mhc = 0;     // mHC: the normed streams, the mix and pre (float); 0 without
  std::uint64_t pre_hidden = 0;  // pre_ps, pre_h, pre_a, pre_f: T x hidden (float)
  std::uint64_t pre_stream = 0;  // pre_x: T x stream (float)
  std::uint64_t pre_blocks = 0;  // T x max_blocks x hidden (float)
  std::uint64_t pre_live = 0;    // T (byte)
  std::uint64_t pre_prompt = 0;  // T (byte): per token, prompt or decode (the per-token matmul rule)
  // DeepSeek-V4.1's CSA2 scratch for T tokens (forward::Csa2Scratch::bytes: floats, then ints)
  // and the per-call selection (forward::Csa2Selection::bytes: T x (index_topk +
  // candidate_topk_blocks + 2) ints and T pointers); the positions of a batch (T ints).
  std::uint64_t csa2_floats = 0, csa2_ints = 0, csa2_selection_bytes = 0;
  // DeepSeek-V4.1's Engram (forward.cpp's engram_* buffers): a pass's decoded rows T x columns
  // x head_dim and the gate's kv (hc + 1) x hidden (float); the tokens, run starts (int) and
  // image flags (byte); one stage's row ids T x (layers + 1) x columns (u64).
  std::uint64_t engram_floats = 0, engram_ints = 0, engram_flags = 0, engram_ids = 0;
  [[nodiscard]] std::uint64_t bytes() const;
};

// The decoded Engram rows an engine keeps (engram::EngramRowSource's cache): part of the
// client's working set for an Engram model, 0 for the others.
inline constexpr std::uint64_t kEngramCacheBytes = std::uint64_t(16) << 20;
std::uint64_t engram_cache_bytes(const ModelConfig& c);

StateSizes state_sizes(const ModelConfig& c, std::uint64_t ctx_tokens);
MlaSizes mla_sizes(const ModelConfig& c, std::uint64_t ctx_tokens, int tokens);
KdaSizes kda_sizes(const ModelConfig& c, int tokens);
// `g` is only read when the model has routed experts.
MoeSizes moe_sizes(const ModelConfig& c, const ExpertGeometry& g);
PrefillMoeSizes prefill_moe_sizes(const ModelConfig& c, const ExpertGeometry& g, int tokens);
// ctx_tokens sizes CSA2's per-group scratch (0 without CSA2 layers: nothing else reads it).
ForwardSizes forward_sizes(const ModelConfig& c, int tokens, std::uint64_t ctx_tokens = 0);
// LUT floats of one input of matrix kind 0 (gate/up) or 2 (down): positions x stages x table.
std::uint64_t lut_floats(const ExpertGeometry& g, int kind);

// Everything one client holds once it has decoded and prefilled (the prefill buffers are sized
// for prefill_capacity(prefill_chunk) tokens; MLA/KDA scratch for the chunk, which covers one
// token). `prefill_chunk`: 1..kMaxPrefillChunk (the caller checks).
struct ClientSizes {
  StateSizes state;
  MlaSizes mla;
  KdaSizes kda;
  MoeSizes moe;
  PrefillMoeSizes prefill_moe;
  ForwardSizes forward;
  std::uint64_t logits = 0;      // vocab floats (the Engine's)
  std::uint64_t engram_cache = 0;  // bytes: the Engine's decoded Engram rows (engram_cache_bytes)
  [[nodiscard]] std::uint64_t state_bytes() const { return state.bytes(); }
  [[nodiscard]] std::uint64_t scratch_bytes() const;
};
ClientSizes client_sizes(const ModelConfig& c, const ExpertGeometry& g, std::uint64_t ctx_tokens,
                         int prefill_chunk = kPrefillChunk);

}  // namespace waste::sizing

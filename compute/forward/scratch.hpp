// Working buffers of the forward pass, one struct per block, each sized by the same functions
// as the memory plan (shared/memory/client_sizing), so the plan's scratch_bytes covers them:
// the single place where buffer sizes are decided. bytes() is each struct's vector capacities,
// what Forward::scratch_bytes() sums for the check against the plan.
#pragma once

#include <cstdint>
#include <vector>

#include "compute/kernels/kernels.hpp"
#include "shared/container/expert_record.hpp"
#include "shared/container/model_config.hpp"
#include "shared/memory/client_sizing.hpp"

namespace waste::forward {

inline constexpr int kMaxLookahead = 64;
// Most tokens one prefill pass (Forward::prefill, Forward::run_batch) may carry; a Forward's
// chunk buffers hold max(its prefill_chunk, 64) tokens (sizing::prefill_capacity).
inline constexpr int kMaxPrefillChunk = 512;
// Gate/up LUT rows of a pass: tokens on the LUT path at once (moe_prefill.cpp groups beyond).
inline constexpr int kLutRows = 64;
// The buffers are sized by shared/memory/client_sizing (what the memory plan sums).
static_assert(kMaxLookahead == sizing::kMaxLookahead && kMaxPrefillChunk == sizing::kMaxPrefillChunk &&
              kLutRows == sizing::kLutRows);
static_assert(kernels::kLutQuantBlock == sizing::kLutQuantBlock);

// MLA working buffers for up to `tokens` tokens at once (absorbed attention, §3.5).
struct MlaScratch {
  int tokens = 0;
  int ctx_tokens = 0;
  std::vector<float> q;        // [T][nh * qd]
  std::vector<float> q_a;      // [T][q_lora]
  std::vector<float> ckv;      // [T][kv_lora + rope]
  std::vector<float> q_tilde;  // [nh][T][kv_lora]  W_kb,h^T q_nope,h
  std::vector<float> ctx_sum;  // [nh][kv_lora]  sum_u a_u c_u
  std::vector<float> scores;   // [nh][ctx_tokens]
  std::vector<float> dot_r;    // [nh][ctx_tokens] q_rope . k_r per cached position
  std::vector<float> o;        // [T][nh * v]
  std::vector<float> gate;     // [T][nh * v]  (K3 output gate)
  void resize(const ModelConfig& c, int ctx_tokens, int tokens = 1);
  [[nodiscard]] std::uint64_t bytes() const;
};

// KDA working buffers for up to `tokens` tokens at once.
struct KdaScratch {
  int tokens = 0;
  std::vector<float> q, k, v;  // [T][C]
  std::vector<float> low;      // [T][D]  f_a / g_a bottleneck
  std::vector<float> g;        // [T][C]  log-space decay
  std::vector<float> gate;     // [T][C]  output gate (pre-sigmoid)
  std::vector<float> beta;     // [T][H]
  std::vector<float> o;        // [T][C]
  void resize(const ModelConfig& c, int tokens = 1);
  [[nodiscard]] std::uint64_t bytes() const;
};

// Decode MoE of one token (moe.hpp).
struct MoeScratch {
  std::vector<float> router, probs, scored;  // [E]
  std::vector<unsigned char> taken;          // [E]
  std::vector<int> ids;                      // [top_k] selection order
  std::vector<float> weights;                // [top_k]
  std::vector<int>* trace_ids = nullptr;     // ForwardTrace on: route() appends each token's ids
  std::vector<float> xin;                    // [lat]
  std::vector<float> lut_gate, lut_up;       // [lat/vec][stages][entries]
  std::vector<float> lut_down;               // [inter/vec][stages][entries]
  std::vector<std::int8_t> lutq_gate, lutq_up, lutq_down;  // VQ4P int8 shadows
  std::vector<float> lutq_scale_gate, lutq_scale_up, lutq_scale_down;
  std::vector<float> a, b;                   // [max(inter, shared, dense)]
  std::vector<float> ys;                     // [top_k][lat] each routed expert's output, by selection index
  std::vector<float> y, ysum;                // [lat]
  std::vector<float> routed;                 // [hid]
  std::vector<float> la_router, la_scored;   // [E] lookahead router of the next layer
  std::vector<unsigned char> la_taken;       // [E]
  std::vector<int> la_ids;                   // [kMaxLookahead]
  void resize(const ModelConfig& c, const ExpertGeometry& g);
  [[nodiscard]] std::uint64_t bytes() const;
};

// Chunked-prefill working set for up to `tokens` tokens (allocated when Forward is built).
struct PrefillMoeScratch {
  int tokens = 0;
  std::vector<int> ids;                       // [T][top_k]
  std::vector<float> weights;                 // [T][top_k]
  std::vector<float> xin;                     // [T][lat] (K3 latent input)
  int lut_rows = 0;                           // min(T, kLutRows)
  std::vector<int> lut_slot;                  // [T] the token's LUT row, -1 when it needs none
  std::vector<float> lut_gate, lut_up;        // [lut_rows][lut floats]
  std::vector<std::int8_t> lutq_gate, lutq_up;
  std::vector<float> lutq_scale_gate, lutq_scale_up;
  std::vector<float> ys;                      // [T][top_k][lat]
  std::vector<int> distinct;                  // experts of the chunk, ascending id
  std::vector<int> user_begin;                // [E+1] CSR over users
  std::vector<int> users;                     // [T*top_k] t * top_k + j
  std::vector<int> fill;                      // [E]
  std::vector<float> router;                  // [T][E] router logits
  std::vector<float> ysum;                    // [T][lat] weighted routed sums
  std::vector<float> routed;                  // [T][hid] (K3 latent up projection)
  std::vector<float> fa, fb;                  // [T][max(shared, dense inter)] FFN activations
  // Prefill by matrix products (expert_batch.cpp), one expert at a time: its tokens' inputs and
  // outputs [T][lat], gate and up rows [T][inter].
  std::vector<float> mm_x, mm_y, mm_a, mm_b;
  // VQ4P: one expert's group of tokens on the LUT path (run_expert_tokens): gate/up rows
  // [group_rows][inter], down LUTs [group_rows][down LUT] and their int8 shadows.
  int group_rows = 0;
  std::vector<float> group_a, group_b, group_lut_down, group_lutq_scale_down;
  std::vector<std::int8_t> group_lutq_down;
  void resize(const ModelConfig& c, const ExpertGeometry& g, int tokens);
  [[nodiscard]] std::uint64_t bytes() const;
};

// Sum of the vector capacities, in bytes, of any number of vectors.
template <typename... V>
std::uint64_t capacity_bytes(const V&... v) {
  return (std::uint64_t(v.capacity() * sizeof(typename V::value_type)) + ...);
}

}  // namespace waste::forward

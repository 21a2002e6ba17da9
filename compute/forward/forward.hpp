// The Kimi-Linear / K3 decode step (waste-v0-reference.md §3): one token in, logits out,
// RunState advanced by one position. Attention (KDA, MLA), MoE and dense FFN, Attention
// Residuals live in their own files; kimi.cpp strings them together top to bottom.
//
// The forward pass only talks to an ExpertSource for expert records, so the in-process and
// daemon sources give identical bits. Threading: the pool splits by rows or heads only, so
// logits do not depend on the thread count. A Forward is used by one thread at a time.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "compute/expert_source.hpp"
#include "compute/forward/ops.hpp"
#include "compute/model/run_state.hpp"
#include "compute/model/weights.hpp"
#include "shared/container/codebooks.hpp"
#include "shared/container/expert_record.hpp"
#include "shared/container/trunk.hpp"

namespace waste::forward {

// MLA working buffers, sized for one model and context (absorbed attention, §3.5).
struct MlaScratch {
  std::vector<float> q;        // [nh * qd]
  std::vector<float> q_a;      // [q_lora]
  std::vector<float> ckv;      // [kv_lora + rope]
  std::vector<float> q_tilde;  // [nh][kv_lora]  W_kb,h^T q_nope,h
  std::vector<float> row;      // [nh][kv_lora]  one dequantised kv_b row per head
  std::vector<float> ctx;      // [nh][kv_lora]  sum_t a_t c_t
  std::vector<float> scores;   // [nh][ctx_tokens]
  std::vector<float> o;        // [nh * v]
  std::vector<float> gate;     // [nh * v]  (K3 output gate)
  void resize(const ModelConfig& c, int ctx_tokens);
};

// Absorbed MLA for the token at `pos`: writes [c, k_r] into latent cache slot `pos` and
// attends slots 0..pos. x is the layer's normed input (hid), out gets hid floats.
void mla_forward(const Exec& exec, const ModelConfig& c, const model::MlaWeights& w, const float* x, int pos,
                 float* latent_cache, MlaScratch& s, float* out);

struct KdaScratch {
  std::vector<float> q, k, v;  // [C]
  std::vector<float> low;      // [D]  f_a / g_a bottleneck
  std::vector<float> g;        // [C]  log-space decay
  std::vector<float> gate;     // [C]  output gate (pre-sigmoid)
  std::vector<float> beta;     // [H]
  std::vector<float> o;        // [C]
  void resize(const ModelConfig& c);
};

// One recurrent KDA step (§3.4) for layer `layer`, updating its S and conv rings in `state`.
void kda_forward(const Exec& exec, const ModelConfig& c, const model::KdaWeights& w, const float* x,
                 model::RunState& state, int layer, KdaScratch& s, float* out);

struct MoeScratch {
  std::vector<float> router, probs, scored;  // [E]
  std::vector<unsigned char> taken;          // [E]
  std::vector<int> ids;                      // [top_k] selection order
  std::vector<float> weights;                // [top_k]
  std::vector<float> xin;                    // [lat]
  std::vector<float> lut_gate, lut_up;       // [lat/vec][stages][entries]
  std::vector<float> lut_down;               // [inter/vec][stages][entries]
  std::vector<std::int8_t> lutq_gate, lutq_up, lutq_down;  // VQ4P int8 shadows
  std::vector<float> lutq_scale_gate, lutq_scale_up, lutq_scale_down;
  std::vector<float> a, b;                   // [max(inter, shared, dense)]
  std::vector<float> y, ysum;                // [lat]
  std::vector<float> routed;                 // [hid]
  void resize(const ModelConfig& c, const ExpertGeometry& g);
};

// Selection (§3.6 steps 1-3) on its own, for tests: ids in selection order, final weights.
void route(const ModelConfig& c, const model::MoeWeights& w, const float* router_logits, MoeScratch& s);

struct ExpertContext {
  ExpertSource& source;
  const Codebooks& codebooks;
  const ExpertGeometry& geometry;
};

// MoE block (§3.6): router, routed experts by RVQ LUT, K3 latent projections, shared experts.
Status moe_forward(const Exec& exec, const ModelConfig& c, const model::MoeWeights& w, int layer, const float* x,
                   const ExpertContext& experts, MoeScratch& s, float* out);

// Dense FFN (layers < first_k_dense_replace) and shared experts: down(act(gate x, up x)).
// a, b need `inter` floats.
void ffn_forward(const Exec& exec, const ModelConfig& c, const model::FfnWeights& w, const float* x, float* a,
                 float* b, float* out);

// AttnRes (§3.7): softmax over candidates blocks[0..nb) and ps, scored by the normed value
// against norm_w * proj_w; out = a_nb * ps + sum_i a_i * blocks[i] (out may alias ps).
void attn_res(const float* blocks, int nb, const float* ps, const float* norm_w, const float* proj_w, int n,
              float eps, float* scores, float* out);

class Forward {
 public:
  struct Inputs {
    const ModelConfig& config;
    const model::ModelWeights& weights;
    const Trunk& trunk;
    const Codebooks& codebooks;
    const ExpertGeometry& geometry;
    ExpertSource& source;
    ThreadPool& pool;
    const kernels::KernelTable& kernels;
    int ctx_tokens;
  };
  explicit Forward(const Inputs& in);

  // Feed `token` at state.position(); logits (vocab floats) of the next token. Precondition:
  // 0 <= token < vocab and state.position() < ctx_tokens (the Engine checks both).
  Status step(int token, model::RunState& state, std::span<float> logits);

 private:
  const ModelConfig& c_;
  const model::ModelWeights& w_;
  const Trunk& trunk_;
  ExpertContext experts_;
  Exec exec_;
  MlaScratch mla_;
  KdaScratch kda_;
  MoeScratch moe_;
  std::vector<float> x_, ps_, h_, a_, f_, ffn_a_, ffn_b_, res_scores_;
};

}  // namespace waste::forward

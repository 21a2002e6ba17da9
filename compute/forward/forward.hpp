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
#include "compute/profile/profile.hpp"
#include "shared/container/codebooks.hpp"
#include "shared/container/expert_record.hpp"
#include "shared/container/trunk.hpp"
#include "shared/memory/client_sizing.hpp"

namespace waste::forward {

// MLA working buffers for up to `tokens` tokens at once (absorbed attention, §3.5).
struct MlaScratch {
  int tokens = 0;
  int ctx_tokens = 0;
  std::vector<float> q;        // [T][nh * qd]
  std::vector<float> q_a;      // [T][q_lora]
  std::vector<float> ckv;      // [T][kv_lora + rope]
  std::vector<float> q_tilde;  // [nh][T][kv_lora]  W_kb,h^T q_nope,h
  std::vector<float> row;      // [nh][kv_lora]  one dequantised kv_b row per head
  std::vector<float> ctx_sum;  // [nh][kv_lora]  sum_u a_u c_u
  std::vector<float> scores;   // [nh][ctx_tokens]
  std::vector<float> dot_r;    // [nh][ctx_tokens] q_rope . k_r per cached position
  std::vector<float> o;        // [T][nh * v]
  std::vector<float> gate;     // [T][nh * v]  (K3 output gate)
  void resize(const ModelConfig& c, int ctx_tokens, int tokens = 1);
};

// Which sequence a token of a batch belongs to, and its position there. A batch mixes tokens of
// several sequences (continuous batching); tokens of one sequence appear in order, at
// consecutive positions. The attention recurrences read and write only their token's state, so
// a batch gives every token the bits it would get alone.
struct TokenSeq {
  model::RunState* state = nullptr;
  int pos = 0;
};

// Absorbed MLA for `n_tokens` consecutive tokens at positions pos0..: writes each token's
// [c, k_r] into latent cache slot pos0 + t, token t attends slots 0..pos0+t. x is the layer's
// normed input [n_tokens][hid], out gets [n_tokens][hid]. n_tokens <= s.tokens.
void mla_forward(const Exec& exec, const ModelConfig& c, const model::MlaWeights& w, const float* x, int n_tokens,
                 int pos0, float* latent_cache, MlaScratch& s, float* out);
// The same for a batch: token t uses seqs[t].state's latent cache of `layer` at seqs[t].pos.
void mla_forward(const Exec& exec, const ModelConfig& c, const model::MlaWeights& w, const float* x,
                 std::span<const TokenSeq> seqs, int layer, MlaScratch& s, float* out);

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
};

// The recurrent KDA (§3.4) of layer `layer` over `n_tokens` consecutive tokens, in order,
// updating its S and conv rings in `state`. x and out are [n_tokens][hid]; n_tokens <= s.tokens.
void kda_forward(const Exec& exec, const ModelConfig& c, const model::KdaWeights& w, const float* x, int n_tokens,
                 model::RunState& state, int layer, KdaScratch& s, float* out);
// The same for a batch: token t steps seqs[t].state (tokens of one state in order).
void kda_forward(const Exec& exec, const ModelConfig& c, const model::KdaWeights& w, const float* x,
                 std::span<const TokenSeq> seqs, int layer, KdaScratch& s, float* out);

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
  std::vector<float> ys;                     // [top_k][lat] each routed expert's output, by selection index
  std::vector<float> y, ysum;                // [lat]
  std::vector<float> routed;                 // [hid]
  std::vector<float> la_router, la_scored;   // [E] lookahead router of the next layer
  std::vector<unsigned char> la_taken;       // [E]
  std::vector<int> la_ids;                   // [kMaxLookahead]
  void resize(const ModelConfig& c, const ExpertGeometry& g);
};

inline constexpr int kMaxLookahead = 64;
inline constexpr int kMaxPrefillChunk = 64;
// The buffers are sized by shared/memory/client_sizing (what the memory plan sums).
static_assert(kMaxLookahead == sizing::kMaxLookahead && kMaxPrefillChunk == sizing::kPrefillChunk);
static_assert(kernels::kLutQuantBlock == sizing::kLutQuantBlock);

// Selection (§3.6 steps 1-3) on its own, for tests: ids in selection order, final weights.
void route(const ModelConfig& c, const model::MoeWeights& w, const float* router_logits, MoeScratch& s);

// The `n` ids a router would pick first (router_scores + router_rank, as route()), for
// lookahead. scored/taken need E entries; ids gets the returned count, min(n, experts in the
// kept groups).
int top_ids(const ModelConfig& c, const model::MoeWeights& w, const float* router_logits, int n, float* scored,
             unsigned char* taken, int* ids);

struct ExpertContext {
  ExpertSource& source;
  const Codebooks& codebooks;
  const ExpertGeometry& geometry;
  std::span<const int> codebook_base;  // per layer, the manifest bank's codebook_base (-1: no bank)
};

// Decode-only extras of one MoE call: lookahead prefetch of the next layer and profiling.
struct MoeExtras {
  const model::MoeWeights* next = nullptr;  // layer+1's MoE weights, null = no lookahead
  int next_layer = -1;
  int lookahead = 0;                        // ids to prefetch
  profile::Stopwatch* watch = nullptr;
};

// MoE block (§3.6): router, routed experts by RVQ LUT, K3 latent projections, shared experts.
// Experts are taken in landing order (acquire_next) into per-selection slots and summed in
// selection order, so the bits do not depend on which record lands first.
Status moe_forward(const Exec& exec, const ModelConfig& c, const model::MoeWeights& w, int layer, const float* x,
                   const ExpertContext& experts, MoeScratch& s, float* out, const MoeExtras& extras = {});

// Chunked-prefill working set for up to `tokens` tokens (allocated on the first prefill).
struct PrefillMoeScratch {
  int tokens = 0;
  std::vector<int> ids;                       // [T][top_k]
  std::vector<float> weights;                 // [T][top_k]
  std::vector<float> xin;                     // [T][lat] (K3 latent input)
  std::vector<float> lut_gate, lut_up;        // [T][lut floats]
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
  void resize(const ModelConfig& c, const ExpertGeometry& g, int tokens);
};

// MoE of a chunk (§3.10): route every token, read each distinct expert once (windows of
// `window` ids, landing order; each request prefetches the next window), apply it to every
// token that chose it with that token's LUTs, then per token sum in selection order: the same
// bits as moe_forward per token.
// x and out are [n_tokens][hid]. Reads: exactly the chunk's distinct experts.
Status moe_prefill(const Exec& exec, const ModelConfig& c, const model::MoeWeights& w, int layer, const float* x,
                   int n_tokens, const ExpertContext& experts, MoeScratch& s, PrefillMoeScratch& p, float* out,
                   int window, profile::Stopwatch* watch = nullptr);

// Dense FFN (layers < first_k_dense_replace) and shared experts: down(act(gate x, up x)).
// a, b need `inter` floats.
void ffn_forward(const Exec& exec, const ModelConfig& c, const model::FfnWeights& w, const float* x, float* a,
                 float* b, float* out);

// ffn_forward for n tokens (row stride `hid` for x/out, `inter` for a/b), each trunk row chunk
// applied to every token while in cache; the same bits as ffn_forward per token.
void ffn_tokens(const Exec& exec, const ModelConfig& c, const model::FfnWeights& w, const float* x, int n, float* a,
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
    std::span<const int> codebook_base;  // per layer: the manifest bank's codebook_base (-1 = no bank)
    int lookahead = 0;                   // next-layer ids prefetched per MoE layer in decode
  };
  explicit Forward(const Inputs& in);

  // Feed `token` at state.position(); logits (vocab floats) of the next token. Precondition:
  // 0 <= token < vocab and state.position() < ctx_tokens (the Engine checks both).
  // `embedding` (hidden floats), when given, replaces embed_tokens[token]: a media position
  // fed the vision tower's output row (the token id is still checked and recorded as fed).
  Status step(int token, model::RunState& state, std::span<float> logits, const float* embedding = nullptr);

  // Chunked prefill (§3.10) of 1..kMaxPrefillChunk tokens: projections batched over the chunk,
  // the attention recurrences token by token, each distinct routed expert read once per chunk;
  // logits of the last token. Same preconditions per token, and position() + tokens.size() <=
  // ctx_tokens.
  // `embeddings`, empty or one pointer per token: a non-null entry replaces that token's
  // embed_tokens row (media positions), as in step().
  Status prefill(std::span<const int> tokens, model::RunState& state, std::span<float> logits,
                 std::span<const float* const> embeddings = {});

  // One sequence's share of a batch: its tokens, fed at state->position() in order, and where
  // the logits after its last token go (vocab floats). `embeddings`: empty, or one pointer per
  // token, as in prefill().
  struct Segment {
    model::RunState* state = nullptr;
    std::span<const int> tokens;
    std::span<float> logits;
    std::span<const float* const> embeddings = {};
  };
  // Continuous batching: the tokens of several sequences (decode steps and prefill chunks alike)
  // through one forward pass: every trunk projection and the lm_head run once over the whole
  // batch, each distinct routed expert is read once and applied to every token that chose it,
  // the attention recurrences step each token's own state. Each segment ends with the logits
  // and state it would have alone (prefill()'s bits). 1..kMaxPrefillChunk tokens in all; the
  // states must be distinct; the same preconditions per segment as prefill().
  Status run_batch(std::span<const Segment> segments);

  // Bytes of every scratch buffer this Forward holds (vector capacities), for the check that
  // the memory plan's scratch_bytes covers it.
  [[nodiscard]] std::uint64_t scratch_bytes() const;

  void set_lookahead(int n) { lookahead_ = n; }
  [[nodiscard]] int lookahead() const { return lookahead_; }
  // Stage timings go to `profile` (null = off).
  void set_profile(profile::EngineProfile* profile) { profile_ = profile; }

 private:
  bool before_attention(const model::LayerWeights& lw, int layer, float* x, float* ps, float* blocks, int& n_blocks,
                        float* h);
  void attention(const model::LayerWeights& lw, int layer, const float* h, int n_tokens, int pos0,
                 model::RunState& state, float* a, profile::Stopwatch& watch);
  void attention(const model::LayerWeights& lw, int layer, const float* h, std::span<const TokenSeq> seqs, float* a,
                 profile::Stopwatch& watch);
  void ensure_batch_scratch();
  Status run_tokens(std::span<const int> tokens, std::span<const TokenSeq> seqs, int& n_blocks,
                    profile::Stopwatch& watch, std::span<const float* const> embeddings = {});
  void after_attention(const model::LayerWeights& lw, bool live, const float* a, float* x, float* ps,
                       const float* blocks, int n_blocks, float* h);
  void after_ffn(const float* f, float* x, float* ps);
  void finish(float* x, const float* blocks, int n_blocks, model::RunState& state, std::span<float> logits,
              profile::Stopwatch& watch);
  const model::MoeWeights* lookahead_target(int layer) const;

  const ModelConfig& c_;
  const model::ModelWeights& w_;
  const Trunk& trunk_;
  ExpertContext experts_;
  Exec exec_;
  int ctx_tokens_;
  int lookahead_;
  int prefill_window_ = 64;
  profile::EngineProfile* profile_ = nullptr;
  std::vector<int> codebook_base_;
  MlaScratch mla_;
  KdaScratch kda_;
  MoeScratch moe_;
  std::vector<float> x_, ps_, h_, a_, f_, ffn_a_, ffn_b_, res_scores_;
  // Chunked prefill, allocated on first use: per token x, ps, h, a, f, block history and
  // AttnRes liveness.
  PrefillMoeScratch pre_moe_;
  std::vector<float> pre_x_, pre_ps_, pre_h_, pre_a_, pre_f_, pre_blocks_;
  std::vector<unsigned char> pre_live_;
  // Batches: each token's sequence, and the lm_head output of every segment's last token.
  std::vector<TokenSeq> batch_seqs_;
  std::vector<int> batch_tokens_;
  std::vector<const float*> batch_embeddings_;  // run_batch: per token, when a segment has overrides
  std::vector<float> batch_logits_;
};

}  // namespace waste::forward

// The forward pass of a model (waste-v0-reference.md §3): one token in, logits out, RunState
// advanced; a prefill chunk; a batch of several sequences. forward.cpp reads top to bottom:
// embed, per layer the attention and mixer blocks the family's plan names (families/), joined
// by the residual stream (residual.hpp), then the head. Each block lives in its own header:
// kda.hpp, mla.hpp, moe.hpp (+ rvq_driver.hpp), ffn.hpp, attn_res.hpp; working buffers in
// scratch.hpp.
//
// The forward pass only talks to an ExpertSource for expert records, so the in-process and
// daemon sources give identical bits. Threading: the pool splits by rows or heads only, so
// logits do not depend on the thread count. A Forward is used by one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "compute/engram/engram_gate.hpp"
#include "compute/engram/engram_rows.hpp"
#include "compute/expert_source.hpp"
#include "compute/forward/csa2.hpp"
#include "compute/forward/families/family.hpp"
#include "compute/forward/kpool_indexer.hpp"
#include "compute/forward/ops.hpp"
#include "compute/forward/residual.hpp"
#include "compute/forward/rvq_driver.hpp"
#include "compute/forward/scratch.hpp"
#include "compute/forward/token_seq.hpp"
#include "compute/forward/trace.hpp"
#include "compute/model/run_state.hpp"
#include "compute/model/weights.hpp"
#include "compute/profile/profile.hpp"
#include "shared/container/codebooks.hpp"
#include "shared/container/expert_record.hpp"
#include "shared/container/trunk.hpp"

namespace waste::forward {

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
    // Most tokens a prefill pass or batch of this Forward carries, 1..kMaxPrefillChunk
    // (EngineOptions::prefill_chunk; clamped): its chunk buffers hold max(this, 64) tokens,
    // what the memory plan counts for that chunk (sizing::prefill_capacity).
    int prefill_chunk = sizing::kPrefillChunk;
    // DeepSeek-V4.1's Engram (config.uses_engram()): the tables' addressing (engram.json, the
    // token map) and where their rows come from. Both outlive the Forward; without them a pass
    // of an Engram model is refused before any layer runs.
    const engram::EngramTables* engram_tables = nullptr;
    engram::EngramRowReader* engram_rows = nullptr;
  };
  explicit Forward(const Inputs& in);

  // Feed `token` at state.position(); logits (vocab floats) of the next token. Precondition:
  // 0 <= token < vocab and state.position() < ctx_tokens (the Engine checks both).
  // `embedding` (hidden floats), when given, replaces embed_tokens[token]: a media position
  // fed the vision tower's output row (the token id is still checked and recorded as fed).
  Status step(int token, model::RunState& state, std::span<float> logits, const float* embedding = nullptr);

  // Chunked prefill (§3.10) of 1..prefill_capacity() tokens: projections batched over the chunk,
  // the attention recurrences token by token, each distinct routed expert read once per chunk;
  // logits of the last token. Same preconditions per token, and position() + tokens.size() <=
  // ctx_tokens.
  // `embeddings`, empty or one pointer per token: a non-null entry replaces that token's
  // embed_tokens row (media positions), as in step().
  // `prompt`: the tokens are prompt tokens (their experts by matrix products under the per-token
  // rule, expert_batch.hpp, even a chunk of one); false: decode steps, step()'s bits.
  Status prefill(std::span<const int> tokens, model::RunState& state, std::span<float> logits,
                 std::span<const float* const> embeddings = {}, bool prompt = true);

  // One sequence's share of a batch: its tokens, fed at state->position() in order, and where
  // the logits after its last token go (vocab floats). `embeddings`: empty, or one pointer per
  // token, as in prefill().
  struct Segment {
    model::RunState* state = nullptr;
    std::span<const int> tokens;
    std::span<float> logits;
    std::span<const float* const> embeddings = {};
    bool prompt = true;  // prompt tokens, or decode steps (as prefill()'s `prompt`)
  };
  // Continuous batching: the tokens of several sequences (decode steps and prefill chunks alike)
  // through one forward pass: every trunk projection and the lm_head run once over the whole
  // batch, each distinct routed expert is read once and applied to every token that chose it,
  // the attention recurrences step each token's own state. Each segment ends with the logits
  // and state it would have alone (prefill()'s bits). 1..prefill_capacity() tokens in all; the
  // states must be distinct; the same preconditions per segment as prefill(). Under the
  // per-token rule a token's bits depend on its segment's `prompt` only, never on the others.
  Status run_batch(std::span<const Segment> segments);
  // All three refuse a state marked broken (RunState::check_usable) before anything is fed, and
  // mark every state of a pass that fails once it began (model::RunState::mark_broken).

  // Bytes of every scratch buffer this Forward holds (vector capacities), for the check that
  // the memory plan's scratch_bytes covers it.
  [[nodiscard]] std::uint64_t scratch_bytes() const;

  // Tokens one prefill pass or batch may carry: max(Inputs::prefill_chunk, 64).
  [[nodiscard]] int prefill_capacity() const { return prefill_capacity_; }

  void set_lookahead(int n) { lookahead_ = n; }
  [[nodiscard]] int lookahead() const { return lookahead_; }
  // Stage timings go to `profile` (null = off).
  void set_profile(profile::EngineProfile* profile) { profile_ = profile; }
  // Each token's decisions appended to `trace` (trace.hpp; null = off). For tests.
  void set_trace(ForwardTrace* trace) { trace_ = trace; }

  // The family's blocks per layer, chosen once at construction (families/family.hpp).
  [[nodiscard]] const ModelPlan& plan() const { return plan_; }

 private:
  Status attention(const model::LayerWeights& lw, int layer, const float* h, int n_tokens, int pos0,
                   model::RunState& state, float* a, profile::Stopwatch& watch);
  Status attention(const model::LayerWeights& lw, int layer, const float* h, std::span<const TokenSeq> seqs,
                   float* a, profile::Stopwatch& watch);
  void bind_indexers(const model::ModelWeights& w);
  void bind_csa2(const model::ModelWeights& w);
  void bind_engram(const Inputs& in);
  // Engram, before the layer loop of a pass: each sequence's run of tokens hashed into row ids
  // (its n-gram history advanced) and every row requested, so the reads overlap the layers
  // before the first Engram layer. A media position (embeddings[t] non-null) is an image token:
  // the look-back stops there and its gate is 0. Nothing is changed when it fails.
  Status step_pass(int token, model::RunState& state, std::span<float> logits, const float* embedding);
  Status prefill_pass(std::span<const int> tokens, model::RunState& state, std::span<float> logits,
                      std::span<const float* const> embeddings, bool prompt);
  Status batch_pass(std::span<const Segment> segments);
  Status engram_begin(std::span<const int> tokens, std::span<const TokenSeq> seqs,
                      std::span<const float* const> embeddings);
  // The Engram spot of a layer (LayerPlan::engram), before its attention site: the rows of the
  // pass's n tokens gated into their hc streams (x: [n][stream_width]).
  Status engram(int layer, float* x, int n_tokens);
  void ensure_batch_scratch();
  Status run_tokens(std::span<const int> tokens, std::span<const TokenSeq> seqs, std::span<const unsigned char> prompt,
                    int& n_blocks, profile::Stopwatch& watch, std::span<const float* const> embeddings = {});
  // The last token's head: `prompt` its kind (the lm_head's int8 rule, ops.hpp head_tokens).
  void finish(float* x, const float* ps, const float* blocks, int n_blocks, model::RunState& state,
              std::span<float> logits, bool prompt, profile::Stopwatch& watch);
  const model::MoeWeights* lookahead_target(int layer) const;

  const ModelConfig& c_;
  const model::ModelWeights& w_;
  const Trunk& trunk_;
  ExpertContext experts_;
  Exec exec_;
  int ctx_tokens_;
  int lookahead_;
  int prefill_window_ = 64;
  int prefill_capacity_ = sizing::kPrefillChunk;
  profile::EngineProfile* profile_ = nullptr;
  // ForwardTrace (null = off): the pass's first entry, and the routed ids of one MoE layer.
  ForwardTrace* trace_ = nullptr;
  std::size_t trace_base_ = 0;
  std::vector<int> trace_ids_;
  void trace_begin(std::span<const int> tokens);
  void trace_moe_begin();
  void trace_moe_end(int layer, int n_tokens);
  void trace_csa2(int layer, int n_tokens);
  ModelPlan plan_;
  Residual residual_;
  std::vector<int> codebook_base_;
  MlaScratch mla_;
  // GLM's DSA indexer per indexed MLA layer (plan_.layers[L].indexed): the weights it reads,
  // bound once (a failed bind is indexer_status_, returned by every pass), and its scratch.
  std::vector<KpoolIndexerWeights> indexer_w_;
  std::vector<std::optional<KpoolIndexer>> indexer_;
  KpoolIndexerScratch indexer_s_;
  Status indexer_status_ = ok();
  // DeepSeek-V4.1's CSA2 per layer (AttentionKind::csa2): the shape, each layer's weights
  // (copied vectors, views of the matrices) and block, bound once (a failed bind is
  // csa_status_, returned by every pass); the call's selection, the scratch, a batch's positions.
  Csa2Shape csa_shape_;
  std::vector<Csa2Weights> csa_w_;
  std::vector<std::optional<Csa2Block>> csa_;
  Csa2Selection csa_sel_;
  Csa2Scratch csa_s_;
  std::vector<int> csa_pos_;
  Status csa_status_ = ok();
  // DeepSeek-V4.1's Engram: the gate's shape and per-layer weights (index: the table's position
  // in the layout), one stage per sequence run of a pass, the pass's rows [T][row_floats] and
  // per-token image flags; a failed bind is engram_status_, returned by every pass.
  const engram::EngramTables* engram_tables_ = nullptr;
  engram::EngramRowReader* engram_rows_ = nullptr;
  engram::EngramGateShape engram_shape_;
  std::vector<engram::EngramGateWeights> engram_w_;
  engram::EngramGateScratch engram_s_;
  std::vector<engram::EngramStage> engram_stages_;
  std::vector<int> engram_run_start_;  // first token of each stage's run, then T
  std::vector<float> engram_row_buf_;
  std::vector<std::int32_t> engram_tokens_;
  std::vector<std::uint8_t> engram_dead_;
  Status engram_status_ = ok();
  KdaScratch kda_;
  MoeScratch moe_;
  std::vector<float> x_, ps_, h_, a_, f_, ffn_a_, ffn_b_;
  // Chunked prefill, allocated on first use: per token x, ps, h, a, f, block history and
  // AttnRes liveness.
  PrefillMoeScratch pre_moe_;
  std::vector<float> pre_x_, pre_ps_, pre_h_, pre_a_, pre_f_, pre_blocks_;
  std::vector<unsigned char> pre_live_;
  std::vector<unsigned char> pre_prompt_;  // per token: a prompt token (1) or a decode step (0)
  // Batches: each token's sequence, and the lm_head output of every segment's last token.
  std::vector<TokenSeq> batch_seqs_;
  std::vector<int> batch_tokens_;
  std::vector<const float*> batch_embeddings_;  // run_batch: per token, when a segment has overrides
  std::vector<float> batch_logits_;
  std::vector<unsigned char> head_kinds_;  // [segments] each last token's kind (head_tokens)
};

}  // namespace waste::forward

// The forward pass, top to bottom (waste-v0-reference.md §3.3): embed, then per layer the
// blocks the family's plan names (families/), joined by the residual stream (residual.hpp),
// then the head. PyTorch equivalents in the comments; each block's math is in its own file
// (kda.cpp, mla.cpp, moe.cpp, moe_prefill.cpp, ffn.cpp). Batches of several sequences: batch.cpp.
#include "compute/forward/forward.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "compute/forward/expert_batch.hpp"
#include "compute/forward/int8_mode.hpp"
#include "compute/forward/ffn.hpp"
#include "compute/forward/kda.hpp"
#include "compute/forward/mla.hpp"
#include "compute/forward/moe.hpp"

namespace waste::forward {

Forward::Forward(const Inputs& in)
    : c_(in.config),
      w_(in.weights),
      trunk_(in.trunk),
      experts_{in.source, in.codebooks, in.geometry, {}},
      exec_{in.pool, in.kernels},
      ctx_tokens_(in.ctx_tokens),
      lookahead_(in.lookahead),
      prefill_capacity_(sizing::prefill_capacity(std::clamp(in.prefill_chunk, 1, kMaxPrefillChunk))),
      plan_(plan_model(in.config)),
      residual_(in.config, plan_.residual, exec_),
      codebook_base_(in.codebook_base.begin(), in.codebook_base.end()) {
  experts_.codebook_base = codebook_base_;
  // Prefill windows of distinct experts (§3.10 hints in windows of 64): smaller with a small
  // cache, so one window's pins do not push the rest of the window into private buffers.
  const std::uint64_t cap = in.source.cache_capacity_records();
  prefill_window_ = cap == 0 || cap >= 128 ? 64 : std::max<int>(std::max(c_.top_k, 1), int(cap / 2));
  if (c_.n_mla_layers() > 0) mla_.resize(c_, in.ctx_tokens);
  if (c_.n_kda_layers() > 0) kda_.resize(c_);  // one token; prefill grows both to a chunk
  bind_indexers(in.weights);
  bind_csa2(in.weights);
  bind_engram(in);
  moe_.resize(c_, in.geometry);
  const sizing::ForwardSizes z = sizing::forward_sizes(c_, 1);
  x_.assign(z.stream, 0.0f);
  ps_.assign(z.hidden, 0.0f);
  h_.assign(z.hidden, 0.0f);
  a_.assign(z.hidden, 0.0f);
  f_.assign(z.hidden, 0.0f);
  ffn_a_.assign(z.ffn, 0.0f);
  ffn_b_.assign(z.ffn, 0.0f);
  // The chunk working set now, not on the first prefill: its first touch (page faults and zero
  // fill of ~150 MB at the Kimi-Linear shape, ~0.8 s on a 2-core VM) then lands in the open, not
  // in the first request's time to first token (docs/LEARNED.md, session 16).
  ensure_batch_scratch();
}

// One KpoolIndexer per indexed MLA layer, on weights copied from the model's (the small vectors)
// and views of its matrices; indexer_w_ is sized before any bind, so the pointers stay valid.
void Forward::bind_indexers(const model::ModelWeights& w) {
  const auto indexed = [](const LayerPlan& l) { return l.indexed; };
  if (std::none_of(plan_.layers.begin(), plan_.layers.end(), indexed)) return;
  auto shape = KpoolIndexerShape::make(c_.index_n_heads, c_.index_head_dim, c_.index_kpool, c_.index_topk, c_.hidden,
                                       c_.q_lora, c_.index_kpool_always_select_tail);
  if (!shape) {
    indexer_status_ = std::unexpected(shape.error());
    return;
  }
  indexer_w_.resize(std::size_t(c_.n_layers));
  indexer_.resize(std::size_t(c_.n_layers));
  for (int L = 0; L < c_.n_layers; ++L) {
    if (!plan_.layers[std::size_t(L)].indexed) continue;
    const model::IndexerWeights& src = w.layers[std::size_t(L)].mla_w.indexer;
    KpoolIndexerWeights& dst = indexer_w_[std::size_t(L)];
    dst = KpoolIndexerWeights{src.wq_b, src.wk, src.k_norm_w, src.k_norm_b, src.weights_proj, src.compress_gate,
                              src.compress_ape};
    auto bound = KpoolIndexer::bind(*shape, dst);
    if (!bound) {
      indexer_status_ = make_error(bound.error().code, "layer " + std::to_string(L) + ": " + bound.error().message);
      return;
    }
    indexer_[std::size_t(L)].emplace(*bound);
  }
  indexer_s_.resize(*shape, ctx_tokens_, 1);
}

// One Csa2Block per CSA2 layer, on weights filled from the model's; csa_w_ is sized before any
// bind, so the pointers stay valid.
void Forward::bind_csa2(const model::ModelWeights& w) {
  const auto csa = [](const LayerPlan& l) { return l.attention == AttentionKind::csa2; };
  if (std::none_of(plan_.layers.begin(), plan_.layers.end(), csa)) return;
  if (plan_.residual == ResidualKind::mhc_single_pass && c_.hc_mult * (c_.hc_mult + 2) > c_.hidden) {
    csa_status_ = make_error(Errc::format, "mhc: hc_mult " + std::to_string(c_.hc_mult) +
                                               " needs hidden_size >= hc_mult * (hc_mult + 2) for the single pass");
    return;
  }
  csa_shape_ = model::csa2_shape(c_);
  csa_w_.resize(std::size_t(c_.n_layers));
  csa_.resize(std::size_t(c_.n_layers));
  for (int L = 0; L < c_.n_layers; ++L) {
    const LayerPlan& plan = plan_.layers[std::size_t(L)];
    if (plan.attention != AttentionKind::csa2) continue;
    const model::Csa2LayerWeights& src = w.layers[std::size_t(L)].csa_w;
    csa_w_[std::size_t(L)] = Csa2Weights{src.wq_a,  src.q_norm, src.wq_b,   src.wkv,           src.kv_norm,
                                         src.wo_a,  src.wo_b,   src.attn_sink, src.c_wkv,       src.c_wgate,
                                         src.c_norm, src.i_wq_b, src.i_weights_proj, src.i_wk, src.i_k_norm};
    auto bound = Csa2Block::bind(csa_shape_, plan.csa2, csa_w_[std::size_t(L)]);
    if (!bound) {
      csa_status_ = make_error(bound.error().code, "layer " + std::to_string(L) + ": " + bound.error().message);
      return;
    }
    csa_[std::size_t(L)].emplace(*bound);
  }
  csa_s_.resize(csa_shape_, ctx_tokens_, 1);
  csa_sel_.resize(csa_shape_, 1);
}

// DeepSeek-V4.1's Engram: the gate of every Engram layer bound once on the model's tensors.
void Forward::bind_engram(const Inputs& in) {
  if (!c_.uses_engram()) return;
  if (in.engram_tables == nullptr || in.engram_rows == nullptr) {
    engram_status_ = make_error(Errc::unsupported, "engram: the model reads Engram rows (layers " +
                                                       std::to_string(c_.engram_layer_ids.front()) +
                                                       ", ...) but no Engram tables were opened");
    return;
  }
  engram_tables_ = in.engram_tables;
  engram_rows_ = in.engram_rows;
  const int columns = (c_.engram_max_ngram_size - 1) * c_.engram_n_heads;
  auto shape = engram::EngramGateShape::make(c_.hc_mult, c_.hidden, columns, c_.engram_head_dim, c_.rms_eps);
  if (!shape) {
    engram_status_ = std::unexpected(shape.error());
    return;
  }
  engram_shape_ = *shape;
  engram_w_.resize(c_.engram_layer_ids.size());
  for (std::size_t i = 0; i < c_.engram_layer_ids.size(); ++i) {
    const int L = c_.engram_layer_ids[i];
    const model::EngramWeights& src = in.weights.layers[std::size_t(L)].engram_w;
    auto bound = engram::EngramGateWeights::bind(engram_shape_, src.wkv, src.q_weight, src.k_weight);
    if (!bound) {
      engram_status_ = make_error(bound.error().code, "layer " + std::to_string(L) + ": " + bound.error().message);
      return;
    }
    engram_w_[i] = std::move(*bound);
  }
  engram_s_.resize(engram_shape_);
  // A pass's buffers at the most tokens one carries (what the memory plan counts).
  const std::size_t T = std::size_t(prefill_capacity_);
  engram_row_buf_.resize(T * std::size_t(columns) * std::size_t(c_.engram_head_dim));
  engram_tokens_.reserve(T);
  engram_dead_.reserve(T);
  engram_run_start_.reserve(T + 1);
}

Status Forward::engram_begin(std::span<const int> tokens, std::span<const TokenSeq> seqs,
                             std::span<const float* const> embeddings) {
  if (!c_.uses_engram()) return ok();
  WASTE_TRY(engram_status_);
  const std::size_t T = tokens.size();
  engram_tokens_.assign(tokens.begin(), tokens.end());
  engram_dead_.assign(T, 0);
  for (std::size_t t = 0; t < embeddings.size() && t < T; ++t) engram_dead_[t] = embeddings[t] != nullptr ? 1 : 0;
  // Runs of consecutive tokens of one sequence (a chunk is one run; a batch one per segment).
  engram_run_start_.clear();
  for (std::size_t t = 0; t < T; ++t) {
    const model::RunState* st = seqs.size() == 1 ? seqs[0].state : seqs[t].state;
    const model::RunState* before = t == 0 ? nullptr : (seqs.size() == 1 ? seqs[0].state : seqs[t - 1].state);
    if (t == 0 || st != before) engram_run_start_.push_back(int(t));
  }
  const std::size_t runs = engram_run_start_.size();
  engram_run_start_.push_back(int(T));
  while (engram_stages_.size() < runs) engram_stages_.emplace_back(*engram_tables_, *engram_rows_);
  for (std::size_t r = 0; r < runs; ++r) {
    const std::size_t t0 = std::size_t(engram_run_start_[r]), t1 = std::size_t(engram_run_start_[r + 1]);
    model::RunState& st = *(seqs.size() == 1 ? seqs[0].state : seqs[t0].state);
    // begin() leaves the history as it was when it fails; an earlier run's has moved on, but a
    // token the engine accepted (0 <= id < vocab) cannot fail the hash.
    WASTE_TRY(engram_stages_[r].begin(std::span<const std::int32_t>(engram_tokens_).subspan(t0, t1 - t0),
                                      std::span<const std::uint8_t>(engram_dead_).subspan(t0, t1 - t0),
                                      st.ngram_history()));
  }
  return ok();
}

Status Forward::engram(int layer, float* x, int n_tokens) {
  const int index = engram_stages_.empty() ? -1 : engram_stages_[0].layer_index(layer);
  if (index < 0) return make_error(Errc::argument, "engram: layer " + std::to_string(layer) + " has no Engram table");
  const std::size_t rf = engram_stages_[0].row_floats();
  if (engram_row_buf_.size() < std::size_t(n_tokens) * rf) engram_row_buf_.resize(std::size_t(n_tokens) * rf);
  const std::size_t runs = engram_run_start_.size() - 1;
  for (std::size_t r = 0; r < runs; ++r) {
    const std::size_t t0 = std::size_t(engram_run_start_[r]), t1 = std::size_t(engram_run_start_[r + 1]);
    auto done = engram_stages_[r].rows(layer, std::span<float>(engram_row_buf_).subspan(t0 * rf, (t1 - t0) * rf));
    if (!done) return make_error(done.error().code, "layer " + std::to_string(layer) + ": " + done.error().message);
  }
  const std::size_t S = std::size_t(c_.stream_width());
  for (int t = 0; t < n_tokens; ++t) {
    engram::engram_gate_apply(exec_, engram_shape_, engram_w_[std::size_t(index)],
                              engram_row_buf_.data() + std::size_t(t) * rf, engram_dead_[std::size_t(t)] == 0,
                              x + std::size_t(t) * S, engram_s_);
  }
  return ok();
}

std::uint64_t Forward::scratch_bytes() const {
  return mla_.bytes() + indexer_s_.allocated_bytes() + kda_.bytes() + moe_.bytes() + pre_moe_.bytes() + residual_.bytes() +
         capacity_bytes(csa_s_.q_resid, csa_s_.q, csa_s_.kv, csa_s_.ckv, csa_s_.cgate, csa_s_.iq, csa_s_.iw,
                        csa_s_.attn, csa_s_.olora, csa_s_.logits, csa_s_.score, csa_s_.cand, csa_s_.rank,
                        csa_s_.latent, csa_pos_, csa_sel_.groups, csa_sel_.count, csa_sel_.blocks,
                        csa_sel_.block_count, csa_sel_.row_source) +
         capacity_bytes(engram_row_buf_, engram_s_.kv, engram_tokens_, engram_run_start_, engram_dead_) +
         std::accumulate(engram_stages_.begin(), engram_stages_.end(), std::uint64_t(0),
                         [](std::uint64_t n, const engram::EngramStage& st) { return n + st.allocated_bytes(); }) +
         capacity_bytes(x_, ps_, h_, a_, f_, ffn_a_, ffn_b_, pre_x_, pre_ps_, pre_h_, pre_a_, pre_f_, pre_blocks_,
                        pre_live_, pre_prompt_) +
         // Continuous batching only (empty for a single sequence): 64 rows of lm_head output.
         capacity_bytes(batch_seqs_, batch_tokens_, batch_logits_, batch_embeddings_);
}

// a = KDA(h) or MLA(h) for n_tokens consecutive tokens from position pos0 (h, a: [n][hid]).
Status Forward::attention(const model::LayerWeights& lw, int layer, const float* h, int n_tokens, int pos0,
                          model::RunState& state, float* a, profile::Stopwatch& watch) {
  watch.add(profile::Stage::other);
  const LayerPlan& plan = plan_.layers[std::size_t(layer)];
  switch (plan.attention) {
    case AttentionKind::kda:
      kda_forward(exec_, c_, lw.kda_w, h, n_tokens, state, layer, kda_, a);
      watch.lap(profile::Stage::attn_kda);
      return ok();
    case AttentionKind::mla:
      if (plan.indexed) {
        // indexer selection: GLM's k-pool DSA indexer picks the cached positions each token
        // attends (all of them below index_topk tokens), from this layer's q_lora residual.
        WASTE_TRY(indexer_status_);
        WASTE_TRY(mla_forward_kpool(exec_, c_, lw.mla_w, *indexer_[std::size_t(layer)], h, n_tokens, pos0,
                                    state.latent_cache(layer).data(), mla_, state.indexer_state(layer), indexer_s_,
                                    a));
      } else {
        mla_forward(exec_, c_, lw.mla_w, h, n_tokens, pos0, state.latent_cache(layer).data(), mla_, a);
      }
      watch.lap(profile::Stage::attn_mla);
      return ok();
    case AttentionKind::csa2: {
      // CSA2: this layer's window, the compressed branch of its KV source (its own when it is
      // one), the call's shared selection.
      WASTE_TRY(csa_status_);
      Csa2Source* source = plan.kv_source >= 0 ? state.csa_source(plan.kv_source) : nullptr;
      auto done = csa_[std::size_t(layer)]->forward(exec_, h, n_tokens, pos0, state.csa_window(layer), source,
                                                    csa_sel_, csa_s_, a);
      if (!done) return make_error(done.error().code, "layer " + std::to_string(layer) + ": " + done.error().message);
      watch.lap(profile::Stage::attn_mla);
      return ok();
    }
  }
  return ok();
}

void Forward::finish(float* x, const float* ps, const float* blocks, int n_blocks, model::RunState& state,
                     std::span<float> logits, bool prompt, profile::Stopwatch& watch) {
  const int hid = c_.hidden;
  residual_.before_head(w_, ps, blocks, n_blocks, x, state.hidden().data());
  state.set_n_blocks(n_blocks);
  watch.add(profile::Stage::other);
  // logits = lm_head(norm(x))
  rms_norm(x, w_.final_norm.data(), hid, c_.rms_eps, h_.data());
  const unsigned char kind[1] = {static_cast<unsigned char>(prompt)};
  head_tokens(exec_, w_.lm_head, w_.decode_head(), h_.data(), hid, kind, logits.data(), c_.vocab);
  watch.lap(profile::Stage::lm_head);
}

const model::MoeWeights* Forward::lookahead_target(int layer) const {
  if (lookahead_ <= 0 || layer + 1 >= c_.n_layers) return nullptr;
  if (plan_.layers[std::size_t(layer + 1)].mixer != MixerKind::moe) return nullptr;
  return &w_.layers[std::size_t(layer + 1)].moe_w;
}

Status Forward::step(int token, model::RunState& state, std::span<float> logits, const float* embedding) {
  WASTE_TRY(state.check_usable());
  const int pos = state.position();
  Status done = step_pass(token, state, logits, embedding);
  if (!done) state.mark_broken(pos, done.error().message);
  return done;
}

Status Forward::step_pass(int token, model::RunState& state, std::span<float> logits, const float* embedding) {
  {
    const int one[1] = {token};
    const TokenSeq seq[1] = {TokenSeq{&state, state.position()}};
    const float* const media[1] = {embedding};
    WASTE_TRY(engram_begin(one, seq, media));
    if (trace_) trace_begin(one);
  }
  profile::Stopwatch watch(profile_);
  watch.start();
  const int pos = state.position();
  float* x = x_.data();
  float* ps = ps_.data();
  float* h = h_.data();
  float* blocks = state.blocks().data();
  int n_blocks = 0;

  // x = embed_tokens[token], or the media row given for this position
  if (embedding != nullptr) {
    std::memcpy(x, embedding, std::size_t(c_.hidden) * sizeof(float));
  } else {
    WASTE_TRY(trunk_.read_row(*w_.embed, token, std::span<float>(x_.data(), std::size_t(c_.hidden))));
  }
  residual_.begin(x);
  watch.lap(profile::Stage::embed);
  csa_sel_.reset();

  for (int L = 0; L < c_.n_layers; ++L) {
    const model::LayerWeights& lw = w_.layers[std::size_t(L)];
    if (plan_.layers[std::size_t(L)].engram) WASTE_TRY(engram(L, x, 1));
    const bool live = residual_.before_attention(lw, L, x, ps, blocks, n_blocks, h);
    WASTE_TRY(attention(lw, L, h, 1, pos, state, a_.data(), watch));
    if (trace_) trace_csa2(L, 1);
    residual_.after_attention(lw, live, a_.data(), x, ps, blocks, n_blocks, h);
    watch.add(profile::Stage::other);

    // f = mlp(h)
    switch (plan_.layers[std::size_t(L)].mixer) {
      case MixerKind::moe: {
        const model::MoeWeights* next = lookahead_target(L);
        const MoeExtras extras{next, L + 1, next ? lookahead_ : 0, &watch, embedding != nullptr};
        if (trace_) trace_moe_begin();
        const Status routed = moe_forward(exec_, c_, lw.moe_w, L, h, experts_, moe_, f_.data(), extras);
        if (trace_) trace_moe_end(L, 1);
        WASTE_TRY(routed);
        break;
      }
      case MixerKind::dense_ffn:
        ffn_forward(exec_, c_, lw.dense, h, ffn_a_.data(), ffn_b_.data(), f_.data());
        watch.lap(profile::Stage::shared_ffn);
        break;
    }
    residual_.after_mixer(f_.data(), x, ps);
  }

  finish(x, ps, blocks, n_blocks, state, logits, /*prompt=*/false, watch);
  state.set_position(pos + 1);
  return ok();
}

// The chunk working set (the LUTs dominate), allocated at construction and kept (a no-op after).
void Forward::ensure_batch_scratch() {
  const int T = prefill_capacity_;
  if (pre_moe_.tokens >= T) return;
  // Sized by the same function as the memory plan (shared/memory/client_sizing).
  const sizing::ForwardSizes z = sizing::forward_sizes(c_, T, std::uint64_t(ctx_tokens_));
  pre_moe_.resize(c_, experts_.geometry, T);
  if (c_.n_mla_layers() > 0) mla_.resize(c_, ctx_tokens_, T);
  if (!indexer_.empty()) {
    if (auto shape = KpoolIndexerShape::make(c_.index_n_heads, c_.index_head_dim, c_.index_kpool, c_.index_topk,
                                             c_.hidden, c_.q_lora, c_.index_kpool_always_select_tail)) {
      indexer_s_.resize(*shape, ctx_tokens_, T);
    }
  }
  if (c_.n_kda_layers() > 0) kda_.resize(c_, T);
  if (!csa_.empty() && csa_status_) {
    csa_s_.resize(csa_shape_, ctx_tokens_, T);
    csa_sel_.resize(csa_shape_, T);
    csa_pos_.assign(std::size_t(T), 0);
  }
  pre_x_.assign(z.pre_stream, 0.0f);
  pre_ps_.assign(z.pre_hidden, 0.0f);
  pre_h_.assign(z.pre_hidden, 0.0f);
  pre_a_.assign(z.pre_hidden, 0.0f);
  pre_f_.assign(z.pre_hidden, 0.0f);
  pre_blocks_.assign(z.pre_blocks, 0.0f);
  pre_live_.assign(z.pre_live, 0);
  pre_prompt_.assign(z.pre_prompt, 0);
}

Status Forward::attention(const model::LayerWeights& lw, int layer, const float* h, std::span<const TokenSeq> seqs,
                          float* a, profile::Stopwatch& watch) {
  watch.add(profile::Stage::other);
  const LayerPlan& plan = plan_.layers[std::size_t(layer)];
  switch (plan.attention) {
    case AttentionKind::kda:
      kda_forward(exec_, c_, lw.kda_w, h, seqs, layer, kda_, a);
      watch.lap(profile::Stage::attn_kda);
      return ok();
    case AttentionKind::mla:
      if (plan.indexed) {
        WASTE_TRY(indexer_status_);
        auto state_of = [&](int t) -> KpoolIndexerState& {
          return seqs[std::size_t(t)].state->indexer_state(layer);
        };
        WASTE_TRY(mla_forward_kpool(exec_, c_, lw.mla_w, *indexer_[std::size_t(layer)], h, seqs, layer, mla_,
                                    FunctionRef<KpoolIndexerState&(int)>(state_of), indexer_s_, a));
      } else {
        mla_forward(exec_, c_, lw.mla_w, h, seqs, layer, mla_, a);
      }
      watch.lap(profile::Stage::attn_mla);
      return ok();
    case AttentionKind::csa2: {
      // CSA2 over a batch: row t is batch token t, with its sequence's window and source.
      WASTE_TRY(csa_status_);
      const int T = int(seqs.size());
      for (int t = 0; t < T; ++t) csa_pos_[std::size_t(t)] = seqs[std::size_t(t)].pos;
      auto window_of = [&](int t) -> Csa2Window& { return seqs[std::size_t(t)].state->csa_window(layer); };
      auto source_of = [&](int t) -> Csa2Source* {
        return plan.kv_source >= 0 ? seqs[std::size_t(t)].state->csa_source(plan.kv_source) : nullptr;
      };
      auto done = csa_[std::size_t(layer)]->forward(
          exec_, h, std::span<const int>(csa_pos_.data(), std::size_t(T)), FunctionRef<Csa2Window&(int)>(window_of),
          FunctionRef<Csa2Source*(int)>(source_of), csa_sel_, csa_s_, a);
      if (!done) return make_error(done.error().code, "layer " + std::to_string(layer) + ": " + done.error().message);
      watch.lap(profile::Stage::attn_mla);
      return ok();
    }
  }
  return ok();
}

// Every layer over T tokens (a prefill chunk, or a batch of sequences): embeddings, AttnRes and
// norms per token; attention with projections batched and the recurrences per token against
// its own sequence (one state for a chunk: `seqs` then holds a single entry at pos0); MoE with
// each distinct expert read once. Leaves the residual stream of token t in pre_x_ row t and its
// block history in pre_blocks_ row t.
Status Forward::run_tokens(std::span<const int> tokens, std::span<const TokenSeq> seqs,
                           std::span<const unsigned char> prompt, int& n_blocks, profile::Stopwatch& watch,
                           std::span<const float* const> embeddings) {
  WASTE_TRY(engram_begin(tokens, seqs, embeddings));
  if (trace_) trace_begin(tokens);
  const int T = int(tokens.size());
  const std::size_t H = std::size_t(c_.hidden), S = std::size_t(c_.stream_width());
  const std::size_t block_stride = std::size_t(seqs[0].state->max_blocks()) * H;
  for (int t = 0; t < T; ++t) {
    const float* media = embeddings.empty() ? nullptr : embeddings[std::size_t(t)];
    if (media != nullptr) {
      std::memcpy(pre_x_.data() + t * S, media, H * sizeof(float));
    } else {
      WASTE_TRY(trunk_.read_row(*w_.embed, tokens[std::size_t(t)], std::span<float>(pre_x_.data() + t * S, H)));
    }
    residual_.begin(pre_x_.data() + t * S);
    watch.lap(profile::Stage::embed);
  }

  n_blocks = 0;
  csa_sel_.reset();
  // The layers' projections see which rows are prompt tokens (the int8 rule, int8_mode.hpp).
  struct PromptRows {
    Exec& exec;
    ~PromptRows() { exec.prompt_rows = {}; }
  } scope{exec_};
  exec_.prompt_rows = prompt;
  for (int L = 0; L < c_.n_layers; ++L) {
    const model::LayerWeights& lw = w_.layers[std::size_t(L)];
    if (plan_.layers[std::size_t(L)].engram) WASTE_TRY(engram(L, pre_x_.data(), T));
    // Every token starts a layer with the same number of blocks (they depend on the layer only).
    int nb = n_blocks;
    for (int t = 0; t < T; ++t) {
      nb = n_blocks;
      pre_live_[std::size_t(t)] = residual_.before_attention(lw, L, pre_x_.data() + t * S, pre_ps_.data() + t * H,
                                                   pre_blocks_.data() + t * block_stride, nb, pre_h_.data() + t * H);
    }
    if (seqs.size() == 1) {
      WASTE_TRY(attention(lw, L, pre_h_.data(), T, seqs[0].pos, *seqs[0].state, pre_a_.data(), watch));
    } else {
      WASTE_TRY(attention(lw, L, pre_h_.data(), seqs, pre_a_.data(), watch));
    }
    if (trace_) trace_csa2(L, T);
    for (int t = 0; t < T; ++t) {
      residual_.after_attention(lw, pre_live_[std::size_t(t)] != 0, pre_a_.data() + t * H, pre_x_.data() + t * S,
                      pre_ps_.data() + t * H, pre_blocks_.data() + t * block_stride, nb, pre_h_.data() + t * H);
    }
    n_blocks = nb;
    watch.add(profile::Stage::other);

    switch (plan_.layers[std::size_t(L)].mixer) {
      case MixerKind::moe: {
        if (trace_) trace_moe_begin();
        const Status routed = moe_prefill(exec_, c_, lw.moe_w, L, pre_h_.data(), T, experts_, moe_, pre_moe_,
                                          pre_f_.data(), prefill_window_, &watch, embeddings);
        if (trace_) trace_moe_end(L, T);
        WASTE_TRY(routed);
        break;
      }
      case MixerKind::dense_ffn:
        ffn_tokens(exec_, c_, lw.dense, pre_h_.data(), T, pre_moe_.fa.data(), pre_moe_.fb.data(), pre_f_.data());
        watch.lap(profile::Stage::shared_ffn);
        break;
    }
    for (int t = 0; t < T; ++t) {
      residual_.after_mixer(pre_f_.data() + t * H, pre_x_.data() + t * S, pre_ps_.data() + t * H);
    }
  }
  return ok();
}

Status Forward::prefill(std::span<const int> tokens, model::RunState& state, std::span<float> logits,
                        std::span<const float* const> embeddings, bool prompt) {
  const int T = int(tokens.size());
  if (T < 1 || T > prefill_capacity_) {
    return make_error(Errc::argument, "prefill chunk of " + std::to_string(T) + " tokens: must be 1.." +
                                          std::to_string(prefill_capacity_));
  }
  if (!embeddings.empty() && embeddings.size() != tokens.size()) {
    return make_error(Errc::argument, "prefill: " + std::to_string(embeddings.size()) + " embedding rows for " +
                                          std::to_string(T) + " tokens");
  }
  // One decode token (or one prompt token where nothing tells the kinds apart: the experts' matrix
  // products, the prompt rule's int8 trunk products and the decode rule's int8 products, which a
  // prompt row never takes at the head, are all off): step()'s bits.
  const bool kinds_differ =
      expert_batch::per_token(experts_.geometry) || int8_prefill_enabled() || int8_decode_enabled();
  if (T == 1 && !(prompt && kinds_differ)) {
    return step(tokens[0], state, logits, embeddings.empty() ? nullptr : embeddings[0]);
  }
  WASTE_TRY(state.check_usable());
  const int pos0 = state.position();
  Status done = prefill_pass(tokens, state, logits, embeddings, prompt);
  if (!done) state.mark_broken(pos0, done.error().message);
  return done;
}

// prefill() past its checks.
Status Forward::prefill_pass(std::span<const int> tokens, model::RunState& state, std::span<float> logits,
                             std::span<const float* const> embeddings, bool prompt) {
  const int T = int(tokens.size());
  profile::Stopwatch watch(profile_);
  watch.start();
  const std::size_t H = std::size_t(c_.hidden);
  const std::size_t block_stride = std::size_t(state.max_blocks()) * H;
  ensure_batch_scratch();
  watch.add(profile::Stage::other);  // the first chunk allocates the scratch: not the embedding's time
  const int pos0 = state.position();
  const TokenSeq chunk[1] = {TokenSeq{&state, pos0}};
  int n_blocks = 0;
  std::fill_n(pre_prompt_.begin(), T, static_cast<unsigned char>(prompt));
  WASTE_TRY(run_tokens(tokens, chunk, std::span<const unsigned char>(pre_prompt_.data(), std::size_t(T)), n_blocks,
                       watch, embeddings));

  // Only the last token goes through the head; its block history becomes the state's.
  const std::size_t last = std::size_t(T - 1);
  float* blocks = state.blocks().data();
  if (n_blocks > 0) {
    std::memcpy(blocks, pre_blocks_.data() + last * block_stride, std::size_t(n_blocks) * H * sizeof(float));
  }
  finish(pre_x_.data() + last * std::size_t(c_.stream_width()), pre_ps_.data() + last * H, blocks, n_blocks, state,
         logits, prompt, watch);
  state.set_position(pos0 + T);
  return ok();
}

// ForwardTrace: one entry per token of the pass; the MoE layers' ids as route() chose them (in
// token order, top_k each), the CSA2 selection rows of the call after each compressed layer.
void Forward::trace_begin(std::span<const int> tokens) {
  trace_base_ = trace_->tokens.size();
  for (int t : tokens) trace_->tokens.push_back(ForwardTrace::Token{t, {}, {}, {}});
}

void Forward::trace_moe_begin() {
  trace_ids_.clear();
  moe_.trace_ids = &trace_ids_;
}

void Forward::trace_moe_end(int layer, int n_tokens) {
  moe_.trace_ids = nullptr;
  const std::size_t K = std::size_t(c_.top_k);
  if (trace_ids_.size() != std::size_t(n_tokens) * K) return;  // the pass failed before routing all
  for (int t = 0; t < n_tokens; ++t) {
    const auto first = trace_ids_.begin() + std::ptrdiff_t(std::size_t(t) * K);
    trace_->tokens[trace_base_ + std::size_t(t)].experts.emplace_back(layer, std::vector<int>(first, first + std::ptrdiff_t(K)));
  }
}

void Forward::trace_csa2(int layer, int n_tokens) {
  const LayerPlan& plan = plan_.layers[std::size_t(layer)];
  if (plan.attention != AttentionKind::csa2 || plan.csa2.ratio <= 0) return;
  for (int t = 0; t < n_tokens; ++t) {
    ForwardTrace::Token& tok = trace_->tokens[trace_base_ + std::size_t(t)];
    const auto g = csa_sel_.groups.begin() + std::ptrdiff_t(std::size_t(t) * std::size_t(csa_sel_.topk));
    tok.attended.emplace_back(layer, std::vector<int>(g, g + csa_sel_.count[std::size_t(t)]));
    if (plan.csa2.candidate_source) {
      const auto b = csa_sel_.blocks.begin() + std::ptrdiff_t(std::size_t(t) * std::size_t(csa_sel_.max_blocks));
      tok.blocks.emplace_back(layer, std::vector<int>(b, b + csa_sel_.block_count[std::size_t(t)]));
    }
  }
}

}  // namespace waste::forward

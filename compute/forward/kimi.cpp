// One decode step of Kimi-Linear / Kimi K3 (waste-v0-reference.md §3.3), top to bottom.
// PyTorch equivalents in the comments; the per-block math lives in kda.cpp, mla.cpp, moe.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "compute/forward/forward.hpp"

namespace waste::forward {

void attn_res(const float* blocks, int nb, const float* ps, const float* norm_w, const float* proj_w, int n,
              float eps, float* scores, float* out) {
  // score_i = sum_j v_i[j] * rms_inv(v_i) * norm_w[j] * proj_w[j], candidates blocks..., ps
  auto score = [&](const float* v) {
    const float inv = rms_inverse(v, n, eps);
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += v[j] * inv * norm_w[j] * proj_w[j];
    return sum;
  };
  float max_score = -INFINITY;
  for (int i = 0; i <= nb; ++i) {
    scores[i] = score(i < nb ? blocks + std::int64_t(i) * n : ps);
    max_score = std::max(max_score, scores[i]);
  }
  float sum = 0.0f;
  for (int i = 0; i <= nb; ++i) {
    scores[i] = std::exp(scores[i] - max_score);
    sum += scores[i];
  }
  for (int i = 0; i <= nb; ++i) scores[i] /= sum;
  // ps term first: this is what makes out == ps safe.
  for (int j = 0; j < n; ++j) out[j] = scores[nb] * ps[j];
  for (int i = 0; i < nb; ++i) {
    const float* b = blocks + std::int64_t(i) * n;
    for (int j = 0; j < n; ++j) out[j] += scores[i] * b[j];
  }
}

Forward::Forward(const Inputs& in)
    : c_(in.config),
      w_(in.weights),
      trunk_(in.trunk),
      experts_{in.source, in.codebooks, in.geometry, {}},
      exec_{in.pool, in.kernels},
      ctx_tokens_(in.ctx_tokens),
      lookahead_(in.lookahead),
      codebook_base_(in.codebook_base.begin(), in.codebook_base.end()) {
  experts_.codebook_base = codebook_base_;
  // Prefill windows of distinct experts (§3.10 hints in windows of 64): smaller with a small
  // cache, so one window's pins do not push the rest of the window into private buffers.
  const std::uint64_t cap = in.source.cache_capacity_records();
  prefill_window_ = cap == 0 || cap >= 128 ? 64 : std::max<int>(std::max(c_.top_k, 1), int(cap / 2));
  if (c_.n_mla_layers() > 0) mla_.resize(c_, in.ctx_tokens);
  if (c_.n_kda_layers() > 0) kda_.resize(c_);  // one token; prefill grows both to a chunk
  moe_.resize(c_, in.geometry);
  const sizing::ForwardSizes z = sizing::forward_sizes(c_, 1);
  x_.assign(z.hidden, 0.0f);
  ps_.assign(z.hidden, 0.0f);
  h_.assign(z.hidden, 0.0f);
  a_.assign(z.hidden, 0.0f);
  f_.assign(z.hidden, 0.0f);
  ffn_a_.assign(z.ffn, 0.0f);
  ffn_b_.assign(z.ffn, 0.0f);
  res_scores_.assign(z.res_scores, 0.0f);
}

namespace {
template <typename... V>
std::uint64_t capacity_bytes(const V&... v) {
  return (std::uint64_t(v.capacity() * sizeof(typename V::value_type)) + ...);
}
}  // namespace

std::uint64_t Forward::scratch_bytes() const {
  return capacity_bytes(mla_.q, mla_.q_a, mla_.ckv, mla_.q_tilde, mla_.row, mla_.ctx_sum, mla_.scores, mla_.dot_r,
                        mla_.o, mla_.gate) +
         capacity_bytes(kda_.q, kda_.k, kda_.v, kda_.low, kda_.g, kda_.gate, kda_.beta, kda_.o) +
         capacity_bytes(moe_.router, moe_.probs, moe_.scored, moe_.taken, moe_.ids, moe_.weights, moe_.xin,
                        moe_.lut_gate, moe_.lut_up, moe_.lut_down, moe_.lutq_gate, moe_.lutq_up, moe_.lutq_down,
                        moe_.lutq_scale_gate, moe_.lutq_scale_up, moe_.lutq_scale_down, moe_.a, moe_.b, moe_.ys,
                        moe_.y, moe_.ysum, moe_.routed, moe_.la_router, moe_.la_scored, moe_.la_taken, moe_.la_ids) +
         capacity_bytes(pre_moe_.ids, pre_moe_.weights, pre_moe_.xin, pre_moe_.lut_gate, pre_moe_.lut_up,
                        pre_moe_.lutq_gate, pre_moe_.lutq_up, pre_moe_.lutq_scale_gate, pre_moe_.lutq_scale_up,
                        pre_moe_.ys, pre_moe_.distinct, pre_moe_.user_begin, pre_moe_.users, pre_moe_.fill,
                        pre_moe_.router, pre_moe_.ysum, pre_moe_.routed, pre_moe_.fa, pre_moe_.fb) +
         capacity_bytes(x_, ps_, h_, a_, f_, ffn_a_, ffn_b_, res_scores_, pre_x_, pre_ps_, pre_h_, pre_a_, pre_f_,
                        pre_blocks_, pre_live_) +
         // Continuous batching only (empty for a single sequence): 64 rows of lm_head output.
         capacity_bytes(batch_seqs_, batch_tokens_, batch_logits_, batch_embeddings_);
}

bool Forward::before_attention(const model::LayerWeights& lw, int layer, float* x, float* ps, float* blocks,
                               int& n_blocks, float* h) {
  const int hid = c_.hidden;
  bool live = true;
  if (c_.attn_res_block > 0) {
    // ps = x; x = attn_res(blocks, ps); a block boundary files ps away and restarts the sum
    std::memcpy(ps, x, std::size_t(hid) * sizeof(float));
    if (n_blocks > 0) {
      attn_res(blocks, n_blocks, ps, lw.attn_res_norm.data(), lw.attn_res_proj.data(), hid, c_.rms_eps,
               res_scores_.data(), x);
    }
    if (layer % c_.attn_res_block == 0) {
      std::memcpy(blocks + std::int64_t(n_blocks) * hid, ps, std::size_t(hid) * sizeof(float));
      ++n_blocks;
      live = false;
    }
  }
  // h = input_layernorm(x)
  rms_norm(x, lw.input_norm.data(), hid, c_.rms_eps, h);
  return live;
}

// a = KDA(h) or MLA(h) for n_tokens consecutive tokens from position pos0 (h, a: [n][hid]).
void Forward::attention(const model::LayerWeights& lw, int layer, const float* h, int n_tokens, int pos0,
                        model::RunState& state, float* a, profile::Stopwatch& watch) {
  watch.add(profile::Stage::other);
  if (lw.kda) {
    kda_forward(exec_, c_, lw.kda_w, h, n_tokens, state, layer, kda_, a);
    watch.lap(profile::Stage::attn_kda);
  } else {
    mla_forward(exec_, c_, lw.mla_w, h, n_tokens, pos0, state.latent_cache(layer).data(), mla_, a);
    watch.lap(profile::Stage::attn_mla);
  }
}

void Forward::after_attention(const model::LayerWeights& lw, bool live, const float* a, float* x, float* ps,
                              const float* blocks, int n_blocks, float* h) {
  const int hid = c_.hidden;
  if (c_.attn_res_block > 0) {
    // ps = ps + a (or a after a boundary); x = attn_res(blocks, ps)
    for (int i = 0; i < hid; ++i) ps[i] = live ? ps[i] + a[i] : a[i];
    attn_res(blocks, n_blocks, ps, lw.mlp_res_norm.data(), lw.mlp_res_proj.data(), hid, c_.rms_eps,
             res_scores_.data(), x);
  } else {
    for (int i = 0; i < hid; ++i) x[i] += a[i];  // x = x + a
  }
  // h = post_attention_layernorm(x)
  rms_norm(x, lw.post_norm.data(), hid, c_.rms_eps, h);
}

void Forward::after_ffn(const float* f, float* x, float* ps) {
  const int hid = c_.hidden;
  if (c_.attn_res_block > 0) {
    for (int i = 0; i < hid; ++i) ps[i] += f[i];  // x = ps = ps + f
    std::memcpy(x, ps, std::size_t(hid) * sizeof(float));
  } else {
    for (int i = 0; i < hid; ++i) x[i] += f[i];  // x = x + f
  }
}

void Forward::finish(float* x, const float* blocks, int n_blocks, model::RunState& state, std::span<float> logits,
                     profile::Stopwatch& watch) {
  const int hid = c_.hidden;
  if (c_.attn_res_block > 0 && n_blocks > 0) {
    attn_res(blocks, n_blocks, x, w_.out_res_norm.data(), w_.out_res_proj.data(), hid, c_.rms_eps,
             res_scores_.data(), x);
  }
  std::memcpy(state.hidden().data(), x, std::size_t(hid) * sizeof(float));
  state.set_n_blocks(n_blocks);
  watch.add(profile::Stage::other);
  // logits = lm_head(norm(x))
  rms_norm(x, w_.final_norm.data(), hid, c_.rms_eps, h_.data());
  matvec(exec_, w_.lm_head, h_.data(), logits.data());
  watch.lap(profile::Stage::lm_head);
}

const model::MoeWeights* Forward::lookahead_target(int layer) const {
  if (lookahead_ <= 0 || layer + 1 >= c_.n_layers) return nullptr;
  const model::LayerWeights& next = w_.layers[std::size_t(layer + 1)];
  return next.moe ? &next.moe_w : nullptr;
}

Status Forward::step(int token, model::RunState& state, std::span<float> logits, const float* embedding) {
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
    WASTE_TRY(trunk_.read_row(*w_.embed, token, x_));
  }
  watch.lap(profile::Stage::embed);

  for (int L = 0; L < c_.n_layers; ++L) {
    const model::LayerWeights& lw = w_.layers[std::size_t(L)];
    const bool live = before_attention(lw, L, x, ps, blocks, n_blocks, h);
    attention(lw, L, h, 1, pos, state, a_.data(), watch);
    after_attention(lw, live, a_.data(), x, ps, blocks, n_blocks, h);
    watch.add(profile::Stage::other);

    // f = mlp(h)
    if (lw.moe) {
      const model::MoeWeights* next = lookahead_target(L);
      const MoeExtras extras{next, L + 1, next ? lookahead_ : 0, &watch};
      WASTE_TRY(moe_forward(exec_, c_, lw.moe_w, L, h, experts_, moe_, f_.data(), extras));
    } else {
      ffn_forward(exec_, c_, lw.dense, h, ffn_a_.data(), ffn_b_.data(), f_.data());
      watch.lap(profile::Stage::shared_ffn);
    }
    after_ffn(f_.data(), x, ps);
  }

  finish(x, blocks, n_blocks, state, logits, watch);
  state.set_position(pos + 1);
  return ok();
}

// The chunk working set (the LUTs dominate), allocated on the first prefill or batch and kept.
void Forward::ensure_batch_scratch() {
  if (pre_moe_.tokens >= kMaxPrefillChunk) return;
  // Sized by the same function as the memory plan (shared/memory/client_sizing).
  const sizing::ForwardSizes z = sizing::forward_sizes(c_, kMaxPrefillChunk);
  pre_moe_.resize(c_, experts_.geometry, kMaxPrefillChunk);
  if (c_.n_mla_layers() > 0) mla_.resize(c_, ctx_tokens_, kMaxPrefillChunk);
  if (c_.n_kda_layers() > 0) kda_.resize(c_, kMaxPrefillChunk);
  pre_x_.assign(z.pre_hidden, 0.0f);
  pre_ps_.assign(z.pre_hidden, 0.0f);
  pre_h_.assign(z.pre_hidden, 0.0f);
  pre_a_.assign(z.pre_hidden, 0.0f);
  pre_f_.assign(z.pre_hidden, 0.0f);
  pre_blocks_.assign(z.pre_blocks, 0.0f);
  pre_live_.assign(z.pre_live, 0);
}

void Forward::attention(const model::LayerWeights& lw, int layer, const float* h, std::span<const TokenSeq> seqs,
                        float* a, profile::Stopwatch& watch) {
  watch.add(profile::Stage::other);
  if (lw.kda) {
    kda_forward(exec_, c_, lw.kda_w, h, seqs, layer, kda_, a);
    watch.lap(profile::Stage::attn_kda);
  } else {
    mla_forward(exec_, c_, lw.mla_w, h, seqs, layer, mla_, a);
    watch.lap(profile::Stage::attn_mla);
  }
}

// Every layer over T tokens (a prefill chunk, or a batch of sequences): embeddings, AttnRes and
// norms per token; attention with projections batched and the recurrences per token against
// its own sequence (one state for a chunk: `seqs` then holds a single entry at pos0); MoE with
// each distinct expert read once. Leaves the residual stream of token t in pre_x_ row t and its
// block history in pre_blocks_ row t.
Status Forward::run_tokens(std::span<const int> tokens, std::span<const TokenSeq> seqs, int& n_blocks,
                           profile::Stopwatch& watch, std::span<const float* const> embeddings) {
  const int T = int(tokens.size());
  const std::size_t H = std::size_t(c_.hidden);
  const std::size_t block_stride = std::size_t(seqs[0].state->max_blocks()) * H;
  for (int t = 0; t < T; ++t) {
    const float* media = embeddings.empty() ? nullptr : embeddings[std::size_t(t)];
    if (media != nullptr) {
      std::memcpy(pre_x_.data() + t * H, media, H * sizeof(float));
    } else {
      WASTE_TRY(trunk_.read_row(*w_.embed, tokens[std::size_t(t)], std::span<float>(pre_x_.data() + t * H, H)));
    }
    watch.lap(profile::Stage::embed);
  }

  n_blocks = 0;
  for (int L = 0; L < c_.n_layers; ++L) {
    const model::LayerWeights& lw = w_.layers[std::size_t(L)];
    // Every token starts a layer with the same number of blocks (they depend on the layer only).
    int nb = n_blocks;
    for (int t = 0; t < T; ++t) {
      nb = n_blocks;
      pre_live_[std::size_t(t)] = before_attention(lw, L, pre_x_.data() + t * H, pre_ps_.data() + t * H,
                                                   pre_blocks_.data() + t * block_stride, nb, pre_h_.data() + t * H);
    }
    if (seqs.size() == 1) {
      attention(lw, L, pre_h_.data(), T, seqs[0].pos, *seqs[0].state, pre_a_.data(), watch);
    } else {
      attention(lw, L, pre_h_.data(), seqs, pre_a_.data(), watch);
    }
    for (int t = 0; t < T; ++t) {
      after_attention(lw, pre_live_[std::size_t(t)] != 0, pre_a_.data() + t * H, pre_x_.data() + t * H,
                      pre_ps_.data() + t * H, pre_blocks_.data() + t * block_stride, nb, pre_h_.data() + t * H);
    }
    n_blocks = nb;
    watch.add(profile::Stage::other);

    if (lw.moe) {
      WASTE_TRY(moe_prefill(exec_, c_, lw.moe_w, L, pre_h_.data(), T, experts_, moe_, pre_moe_, pre_f_.data(),
                            prefill_window_, &watch));
    } else {
      ffn_tokens(exec_, c_, lw.dense, pre_h_.data(), T, pre_moe_.fa.data(), pre_moe_.fb.data(), pre_f_.data());
      watch.lap(profile::Stage::shared_ffn);
    }
    for (int t = 0; t < T; ++t) after_ffn(pre_f_.data() + t * H, pre_x_.data() + t * H, pre_ps_.data() + t * H);
  }
  return ok();
}

Status Forward::prefill(std::span<const int> tokens, model::RunState& state, std::span<float> logits,
                        std::span<const float* const> embeddings) {
  const int T = int(tokens.size());
  if (T < 1 || T > kMaxPrefillChunk) {
    return make_error(Errc::argument, "prefill chunk of " + std::to_string(T) + " tokens: must be 1.." +
                                          std::to_string(kMaxPrefillChunk));
  }
  if (!embeddings.empty() && embeddings.size() != tokens.size()) {
    return make_error(Errc::argument, "prefill: " + std::to_string(embeddings.size()) + " embedding rows for " +
                                          std::to_string(T) + " tokens");
  }
  if (T == 1) return step(tokens[0], state, logits, embeddings.empty() ? nullptr : embeddings[0]);
  profile::Stopwatch watch(profile_);
  watch.start();
  const std::size_t H = std::size_t(c_.hidden);
  const std::size_t block_stride = std::size_t(state.max_blocks()) * H;
  ensure_batch_scratch();
  watch.add(profile::Stage::other);  // the first chunk allocates the scratch: not the embedding's time
  const int pos0 = state.position();
  const TokenSeq chunk[1] = {TokenSeq{&state, pos0}};
  int n_blocks = 0;
  WASTE_TRY(run_tokens(tokens, chunk, n_blocks, watch, embeddings));

  // Only the last token goes through the head; its block history becomes the state's.
  const std::size_t last = std::size_t(T - 1);
  float* blocks = state.blocks().data();
  if (n_blocks > 0) {
    std::memcpy(blocks, pre_blocks_.data() + last * block_stride, std::size_t(n_blocks) * H * sizeof(float));
  }
  finish(pre_x_.data() + last * H, blocks, n_blocks, state, logits, watch);
  state.set_position(pos0 + T);
  return ok();
}

Status Forward::run_batch(std::span<const Segment> segments) {
  if (segments.empty()) return make_error(Errc::argument, "batch of no sequences");
  std::size_t total = 0;
  for (const Segment& seg : segments) {
    if (!seg.state || seg.tokens.empty()) return make_error(Errc::argument, "batch segment without a state or tokens");
    if (seg.logits.size() < std::size_t(c_.vocab)) {
      return make_error(Errc::argument, "batch segment logits hold " + std::to_string(seg.logits.size()) +
                                            " floats, the vocabulary has " + std::to_string(c_.vocab));
    }
    if (!seg.embeddings.empty() && seg.embeddings.size() != seg.tokens.size()) {
      return make_error(Errc::argument, "batch segment with " + std::to_string(seg.embeddings.size()) +
                                            " embedding rows for " + std::to_string(seg.tokens.size()) + " tokens");
    }
    if (seg.state->position() + int(seg.tokens.size()) > ctx_tokens_) {
      return make_error(Errc::argument, "batch segment at position " + std::to_string(seg.state->position()) +
                                            " with " + std::to_string(seg.tokens.size()) +
                                            " tokens passes the context of " + std::to_string(ctx_tokens_));
    }
    total += seg.tokens.size();
  }
  if (total > std::size_t(kMaxPrefillChunk)) {
    return make_error(Errc::argument, "batch of " + std::to_string(total) + " tokens: must be 1.." +
                                          std::to_string(kMaxPrefillChunk));
  }
  for (std::size_t i = 0; i < segments.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (segments[i].state == segments[j].state) {
        return make_error(Errc::argument, "batch segments " + std::to_string(j) + " and " + std::to_string(i) +
                                              " share one sequence state");
      }
    }
  }
  if (segments.size() == 1) {
    return prefill(segments[0].tokens, *segments[0].state, segments[0].logits, segments[0].embeddings);
  }

  profile::Stopwatch watch(profile_);
  watch.start();
  const std::size_t H = std::size_t(c_.hidden), V = std::size_t(c_.vocab);
  const std::size_t block_stride = std::size_t(segments[0].state->max_blocks()) * H;
  ensure_batch_scratch();
  watch.add(profile::Stage::other);
  batch_tokens_.clear();
  batch_seqs_.clear();
  batch_embeddings_.clear();
  // Overrides only when a segment has some: a text-only batch takes embed_tokens as before.
  const bool overrides = std::any_of(segments.begin(), segments.end(), [](const Segment& s) { return !s.embeddings.empty(); });
  for (const Segment& seg : segments) {
    const int pos0 = seg.state->position();
    for (std::size_t t = 0; t < seg.tokens.size(); ++t) {
      batch_tokens_.push_back(seg.tokens[t]);
      batch_seqs_.push_back(TokenSeq{seg.state, pos0 + int(t)});
      if (overrides) batch_embeddings_.push_back(seg.embeddings.empty() ? nullptr : seg.embeddings[t]);
    }
  }
  int n_blocks = 0;
  WASTE_TRY(run_tokens(batch_tokens_, batch_seqs_, n_blocks, watch, batch_embeddings_));

  // Per segment, its last token as finish() takes it (final AttnRes, state, norm), with the
  // normed rows gathered so that one lm_head pass serves the whole batch. Row k of pre_h_ is
  // free by then: it belonged to token k <= the last token of segment k.
  const std::size_t K = segments.size();
  std::size_t end = 0;
  for (std::size_t k = 0; k < K; ++k) {
    const Segment& seg = segments[k];
    end += seg.tokens.size();
    const std::size_t last = end - 1;
    model::RunState& state = *seg.state;
    float* x = pre_x_.data() + last * H;
    float* blocks = state.blocks().data();
    if (n_blocks > 0) {
      std::memcpy(blocks, pre_blocks_.data() + last * block_stride, std::size_t(n_blocks) * H * sizeof(float));
    }
    if (c_.attn_res_block > 0 && n_blocks > 0) {
      attn_res(blocks, n_blocks, x, w_.out_res_norm.data(), w_.out_res_proj.data(), c_.hidden, c_.rms_eps,
               res_scores_.data(), x);
    }
    std::memcpy(state.hidden().data(), x, H * sizeof(float));
    state.set_n_blocks(n_blocks);
    rms_norm(x, w_.final_norm.data(), c_.hidden, c_.rms_eps, pre_h_.data() + k * H);
    state.set_position(state.position() + int(seg.tokens.size()));
  }
  watch.add(profile::Stage::other);
  // logits = lm_head(norm(x)) for every segment at once: each row the same bits as matvec.
  if (batch_logits_.size() < K * V) batch_logits_.resize(K * V);
  matvec_tokens(exec_, w_.lm_head, pre_h_.data(), std::int64_t(H), int(K), batch_logits_.data(), std::int64_t(V));
  for (std::size_t k = 0; k < K; ++k) {
    std::memcpy(segments[k].logits.data(), batch_logits_.data() + k * V, V * sizeof(float));
  }
  watch.lap(profile::Stage::lm_head);
  return ok();
}

}  // namespace waste::forward

// Continuous batching (Forward::run_batch, forward.hpp): the tokens of several sequences through
// one pass of the layer loop (run_tokens), then every segment's last token through the head in
// one lm_head pass.
#include <algorithm>
#include <cstring>
#include <string>

#include "compute/forward/forward.hpp"

namespace waste::forward {

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
  if (total > std::size_t(prefill_capacity_)) {
    return make_error(Errc::argument, "batch of " + std::to_string(total) + " tokens: must be 1.." +
                                          std::to_string(prefill_capacity_));
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
    return prefill(segments[0].tokens, *segments[0].state, segments[0].logits, segments[0].embeddings,
                   segments[0].prompt);
  }
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (Status usable = segments[i].state->check_usable(); !usable) {
      return std::unexpected(usable.error().with_context("batch segment " + std::to_string(i)));
    }
  }
  // A failed pass leaves every position where it was (they advance after the last fallible step).
  Status done = batch_pass(segments);
  if (!done) {
    for (const Segment& seg : segments) seg.state->mark_broken(seg.state->position(), done.error().message);
  }
  return done;
}

// run_batch() of two or more segments, past its checks.
Status Forward::batch_pass(std::span<const Segment> segments) {

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
      pre_prompt_[batch_tokens_.size() - 1] = static_cast<unsigned char>(seg.prompt);
      if (overrides) batch_embeddings_.push_back(seg.embeddings.empty() ? nullptr : seg.embeddings[t]);
    }
  }
  int n_blocks = 0;
  WASTE_TRY(run_tokens(batch_tokens_, batch_seqs_,
                       std::span<const unsigned char>(pre_prompt_.data(), batch_tokens_.size()), n_blocks, watch,
                       batch_embeddings_));

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
    float* x = pre_x_.data() + last * std::size_t(c_.stream_width());
    float* blocks = state.blocks().data();
    if (n_blocks > 0) {
      std::memcpy(blocks, pre_blocks_.data() + last * block_stride, std::size_t(n_blocks) * H * sizeof(float));
    }
    residual_.before_head(w_, pre_ps_.data() + last * H, blocks, n_blocks, x, state.hidden().data());
    state.set_n_blocks(n_blocks);
    rms_norm(x, w_.final_norm.data(), c_.hidden, c_.rms_eps, pre_h_.data() + k * H);
    state.set_position(state.position() + int(seg.tokens.size()));
  }
  watch.add(profile::Stage::other);
  // logits = lm_head(norm(x)) for every segment at once, each row by its last token's kind: the
  // bits finish() gives it alone.
  if (batch_logits_.size() < K * V) batch_logits_.resize(K * V);
  if (head_kinds_.size() < K) head_kinds_.resize(K);
  for (std::size_t k = 0; k < K; ++k) head_kinds_[k] = static_cast<unsigned char>(segments[k].prompt);
  head_tokens(exec_, w_.lm_head, w_.decode_head(), pre_h_.data(), std::int64_t(H), std::span<const unsigned char>(head_kinds_.data(), K),
              batch_logits_.data(), std::int64_t(V));
  for (std::size_t k = 0; k < K; ++k) {
    std::memcpy(segments[k].logits.data(), batch_logits_.data() + k * V, V * sizeof(float));
  }
  watch.lap(profile::Stage::lm_head);
  return ok();
}

}  // namespace waste::forward

// The CSA2 attention block (csa2.hpp has the maths). Projections run batched over the call
// (matvec_tokens gives each token its matvec bits); then one token at a time: its window slot,
// its compressor step, its selection, its attention, so token t of a chunk sees exactly what it
// would see alone and every chunking gives the same bits. The pool splits by output rows, groups
// or heads only.
#include "compute/forward/csa2.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "compute/forward/rope.hpp"

namespace waste::forward {
namespace {

constexpr std::int64_t kGroupsPerChunk = 64;

std::string dims(std::int64_t a, std::int64_t b) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
}

Status check_matrix(const char* name, const kernels::QuantMatrix& m, std::int64_t rows, std::int64_t cols) {
  if (m.payload == nullptr || m.rows != rows || m.cols != cols) {
    return make_error(Errc::format, std::string("csa2: ") + name + ": expected " + dims(rows, cols) + ", found " +
                                        (m.payload == nullptr ? "none" : dims(m.rows, m.cols)));
  }
  return ok();
}

Status check_vector(const char* name, const std::vector<float>& v, std::size_t n) {
  if (v.size() != n) {
    return make_error(Errc::format, std::string("csa2: ") + name + ": expected " + std::to_string(n) +
                                        " values, found " + std::to_string(v.size()));
  }
  return ok();
}

// Rows [r0, r0 + n) of a trunk matrix, as a matrix of their own.
kernels::QuantMatrix row_slice(const kernels::QuantMatrix& m, std::int64_t r0, std::int64_t n) {
  kernels::QuantMatrix v = m;
  v.payload = m.payload + r0 * m.row_stride;
  if (m.scales != nullptr) v.scales = m.scales + r0 * ((m.cols + m.group - 1) / m.group);
  v.rows = n;
  return v;
}

float dot(const float* a, const float* b, int n) {
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

std::string span_of(int pos0, int n) { return std::to_string(pos0) + ".." + std::to_string(pos0 + n - 1); }

}  // namespace

Status Csa2Weights::check(const Csa2Shape& c, const Csa2Role& role) const {
  const std::int64_t HD = std::int64_t(c.heads) * c.head_dim;
  WASTE_TRY(check_matrix("wq_a", wq_a, c.q_lora, c.hidden));
  WASTE_TRY(check_vector("q_norm", q_norm, std::size_t(c.q_lora)));
  WASTE_TRY(check_matrix("wq_b", wq_b, HD, c.q_lora));
  WASTE_TRY(check_matrix("wkv", wkv, c.head_dim, c.hidden));
  WASTE_TRY(check_vector("kv_norm", kv_norm, std::size_t(c.head_dim)));
  WASTE_TRY(check_matrix("wo_a", wo_a, std::int64_t(c.o_groups) * c.o_lora, HD / c.o_groups));
  WASTE_TRY(check_matrix("wo_b", wo_b, c.hidden, std::int64_t(c.o_groups) * c.o_lora));
  WASTE_TRY(check_vector("attn_sink", attn_sink, std::size_t(c.heads)));
  if (role.kv_source) {
    WASTE_TRY(check_matrix("compressor.wkv", c_wkv, c.head_dim, c.hidden));
    if (role.ratio > 1) WASTE_TRY(check_matrix("compressor.wgate", c_wgate, c.head_dim, c.hidden));
    WASTE_TRY(check_vector("compressor.norm", c_norm, std::size_t(c.head_dim)));
  }
  if (role.index_source) {
    WASTE_TRY(check_matrix("indexer.wq_b", i_wq_b, std::int64_t(c.index_heads) * c.index_head_dim, c.q_lora));
    WASTE_TRY(check_matrix("indexer.weights_proj", i_weights_proj, c.index_heads, c.hidden));
    if (role.kv_source) {
      WASTE_TRY(check_matrix("indexer.wk", i_wk, c.index_head_dim, c.head_dim));
      WASTE_TRY(check_vector("indexer.k_norm", i_k_norm, std::size_t(c.index_head_dim)));
    }
  }
  return ok();
}

void Csa2Selection::resize(const Csa2Shape& c, int n_tokens) {
  tokens = n_tokens;
  topk = c.index_topk;
  max_blocks = c.candidate_blocks;
  groups.assign(std::size_t(n_tokens) * std::size_t(topk), 0);
  count.assign(std::size_t(n_tokens), 0);
  blocks.assign(std::size_t(n_tokens) * std::size_t(max_blocks), 0);
  block_count.assign(std::size_t(n_tokens), 0);
  row_source.assign(std::size_t(n_tokens), nullptr);
  reset();
}

std::uint64_t Csa2Selection::bytes(const Csa2Shape& c, int n_tokens) {
  return std::uint64_t(n_tokens) *
         (std::uint64_t(c.index_topk + c.candidate_blocks + 2) * sizeof(int) + sizeof(const Csa2Source*));
}

namespace {

struct ScratchSizes {
  std::uint64_t floats, ints;
};

ScratchSizes scratch_sizes(const Csa2Shape& c, int ctx_tokens, int tokens) {
  const std::uint64_t T = std::uint64_t(tokens), HD = std::uint64_t(c.heads) * std::uint64_t(c.head_dim);
  const std::uint64_t D = std::uint64_t(c.head_dim), ID = std::uint64_t(c.index_head_dim);
  const std::uint64_t G = std::uint64_t(std::max(ctx_tokens, 1));
  const std::uint64_t floats = T * std::uint64_t(c.q_lora) + 2 * T * HD + 3 * T * D +
                               T * std::uint64_t(c.index_heads) * (ID + 1) +
                               T * std::uint64_t(c.o_groups) * std::uint64_t(c.o_lora) +
                               std::uint64_t(c.heads) * std::uint64_t(c.window + c.index_topk) + 2 * G + D + ID +
                               5 * std::uint64_t(c.rope_dim / 2);
  return {floats, 2 * G};
}

}  // namespace

void Csa2Scratch::resize(const Csa2Shape& c, int ctx_tokens, int n_tokens) {
  tokens = n_tokens;
  max_groups = std::max(ctx_tokens, 1);
  const std::size_t T = std::size_t(n_tokens), HD = std::size_t(c.heads) * std::size_t(c.head_dim);
  const std::size_t D = std::size_t(c.head_dim), G = std::size_t(max_groups);
  q_resid.assign(T * std::size_t(c.q_lora), 0.0f);
  q.assign(T * HD, 0.0f);
  kv.assign(T * D, 0.0f);
  ckv.assign(T * D, 0.0f);
  cgate.assign(T * D, 0.0f);
  iq.assign(T * std::size_t(c.index_heads) * std::size_t(c.index_head_dim), 0.0f);
  iw.assign(T * std::size_t(c.index_heads), 0.0f);
  attn.assign(T * HD, 0.0f);
  olora.assign(T * std::size_t(c.o_groups) * std::size_t(c.o_lora), 0.0f);
  logits.assign(std::size_t(c.heads) * std::size_t(c.window + c.index_topk), 0.0f);
  score.assign(2 * G, 0.0f);  // group scores, then block scores
  cand.assign(G, 0);
  rank.assign(G, 0);
  latent.assign(D + std::size_t(c.index_head_dim) + 5 * std::size_t(c.rope_dim / 2), 0.0f);
}

std::uint64_t Csa2Scratch::bytes(const Csa2Shape& c, int ctx_tokens, int n_tokens) {
  const ScratchSizes z = scratch_sizes(c, ctx_tokens, n_tokens);
  return z.floats * sizeof(float) + z.ints * sizeof(int);
}

Csa2Block::Csa2Block(const Csa2Shape& shape, const Csa2Role& role, const Csa2Weights& weights)
    : shape_(&shape), role_(role), w_(&weights) {
  const int pairs = shape.rope_dim / 2;
  c_inv_freq_.resize(std::size_t(pairs));
  rope_inv_freq(shape.compress_rope, shape.rope_dim, c_inv_freq_.data());
  inv_freq_.resize(std::size_t(pairs));
  rope_inv_freq(role.ratio > 0 ? shape.compress_rope : shape.main_rope, shape.rope_dim, inv_freq_.data());
}

Result<Csa2Block> Csa2Block::bind(const Csa2Shape& shape, const Csa2Role& role, const Csa2Weights& weights) {
  WASTE_TRY(shape.check());
  WASTE_TRY(role.check());
  WASTE_TRY(weights.check(shape, role));
  return Csa2Block(shape, role, weights);
}

Status Csa2Block::check_call(int n, int pos0, const Csa2Window& window, const Csa2Source* source,
                             const Csa2Selection& sel, const Csa2Scratch& s) const {
  if (pos0 != window.tokens()) {
    return make_error(Errc::argument, "csa2: the call starts at position " + std::to_string(pos0) +
                                          " but the window holds " + std::to_string(window.tokens()) + " tokens");
  }
  if (n <= 0 || n > s.tokens || n > sel.tokens) {
    return make_error(Errc::argument, "csa2: " + std::to_string(n) + " tokens exceed the scratch's " +
                                          std::to_string(std::min(s.tokens, sel.tokens)));
  }
  if (role_.ratio == 0) return ok();
  if (source == nullptr) {
    return make_error(Errc::argument,
                      "csa2: the layer has compress ratio " + std::to_string(role_.ratio) + " but no source");
  }
  if (source->ratio() != role_.ratio) {
    return make_error(Errc::argument, "csa2: the layer's compress ratio " + std::to_string(role_.ratio) +
                                          " differs from its source's " + std::to_string(source->ratio()));
  }
  const int expected = role_.kv_source ? pos0 : pos0 + n;
  if (source->tokens() != expected) {
    return make_error(Errc::argument, "csa2: the source holds " + std::to_string(source->tokens()) +
                                          " tokens, expected " + std::to_string(expected));
  }
  if (pos0 + n > source->ctx_tokens() || pos0 + n > s.max_groups) {
    return make_error(Errc::argument, "csa2: position " + std::to_string(pos0 + n - 1) + " exceeds the source's " +
                                          std::to_string(std::min<std::int64_t>(source->ctx_tokens(), s.max_groups)) +
                                          " tokens");
  }
  if (role_.index_source && !source->has_index_keys()) {
    return make_error(Errc::argument, "csa2: the source has no index keys");
  }
  if (!role_.index_source && (sel.pos0 != pos0 || sel.n != n || sel.source != source)) {
    return make_error(Errc::argument, "csa2: no index source has selected for tokens " + span_of(pos0, n));
  }
  if (role_.uses_candidates && (sel.cand_pos0 != pos0 || sel.cand_n != n || sel.source != source)) {
    return make_error(Errc::argument, "csa2: no candidate blocks for tokens " + span_of(pos0, n));
  }
  return ok();
}

// One source token: into the group being filled; a complete group becomes its latent and key.
void Csa2Block::compress(const Exec& exec, const float* ckv, const float* cgate, Csa2Source& src,
                         Csa2Scratch& s) const {
  const Csa2Shape& c = *shape_;
  const int D = c.head_dim, ID = c.index_head_dim, r = role_.ratio, pairs = c.rope_dim / 2;
  float* latent = s.latent.data();
  float* key = latent + D;
  float* cs = key + ID;  // [cos][sin] of the group's position
  if (r == 1) {
    std::memcpy(latent, ckv, std::size_t(D) * sizeof(float));
  } else {
    float* part_kv = src.buffer_.data() + src.max_groups_ * (D + src.index_dim_);
    float* part_gate = part_kv + std::int64_t(r) * D;
    const int i = src.tokens_ % r;
    std::memcpy(part_kv + std::int64_t(i) * D, ckv, std::size_t(D) * sizeof(float));
    std::memcpy(part_gate + std::int64_t(i) * D, cgate, std::size_t(D) * sizeof(float));
    if (i != r - 1) {
      ++src.tokens_;
      return;
    }
    for (int ch = 0; ch < D; ++ch) {  // per channel: softmax over the group's tokens
      float mx = -INFINITY;
      for (int k = 0; k < r; ++k) mx = std::max(mx, part_gate[k * D + ch]);
      float sum = 0.0f, acc = 0.0f;
      for (int k = 0; k < r; ++k) {
        const float e = std::exp(part_gate[k * D + ch] - mx);
        sum += e;
        acc += e * part_kv[k * D + ch];
      }
      latent[ch] = acc / sum;
    }
  }
  ++src.tokens_;
  const int j = src.tokens_ / r - 1;
  rms_norm(latent, w_->c_norm.data(), D, c.eps, latent);
  rope_angles(c_inv_freq_.data(), pairs, j * r, cs, cs + pairs);
  if (src.index_dim_ > 0) {
    matvec(exec, w_->i_wk, latent, key);
    rms_norm(key, w_->i_k_norm.data(), ID, c.eps, key);
    rope_rotate(key + ID - c.rope_dim, pairs, cs, cs + pairs);
    std::memcpy(src.buffer_.data() + src.max_groups_ * D + std::int64_t(j) * ID, key, std::size_t(ID) * sizeof(float));
  }
  rope_rotate(latent + D - c.rope_dim, pairs, cs, cs + pairs);
  std::memcpy(src.buffer_.data() + std::int64_t(j) * D, latent, std::size_t(D) * sizeof(float));
}

// Token t's selection: score the visible groups (inside the candidate blocks when the layer uses
// them), the candidate blocks when it is the candidate source, then the top index_topk.
void Csa2Block::select(const Exec& exec, int t, int pos, const Csa2Source& src, Csa2Selection& sel,
                       Csa2Scratch& s) const {
  const Csa2Shape& c = *shape_;
  const int IH = c.index_heads, ID = c.index_head_dim, B = c.candidate_block_size;
  const int visible = (pos + 1) / role_.ratio;  // groups ending at or before pos
  int* cand = s.cand.data();
  int m = 0;
  if (role_.uses_candidates) {
    const int* kept = sel.blocks.data() + std::int64_t(t) * sel.max_blocks;
    for (int i = 0; i < sel.block_count[std::size_t(t)]; ++i) {
      for (int j = kept[i] * B; j < std::min(kept[i] * B + B, visible); ++j) cand[m++] = j;
    }
  } else {
    for (int j = 0; j < visible; ++j) cand[m++] = j;
  }
  const float* q = s.iq.data() + std::int64_t(t) * IH * ID;
  const float* w = s.iw.data() + std::int64_t(t) * IH;
  const float inv_sqrt_d = 1.0f / std::sqrt(float(ID));
  float* score = s.score.data();
  exec.pool.parallel_for(m, kGroupsPerChunk, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const float* key = src.index_key(cand[i]);
      float total = 0.0f;
      for (int h = 0; h < IH; ++h) total += w[h] * std::max(dot(q + std::int64_t(h) * ID, key, ID) * inv_sqrt_d, 0.0f);
      score[i] = std::isnan(total) ? -INFINITY : total;  // a strict order for the ranking
    }
  });
  int* rank = s.rank.data();
  // The `keep` best of ranks[0..k) by score (higher first, the lower index on a tie), ascending.
  const auto best = [](int* ranks, int k, int keep, const float* sc) {
    const auto better = [sc](int a, int b) { return sc[a] > sc[b] || (sc[a] == sc[b] && a < b); };
    keep = std::min(keep, k);
    std::nth_element(ranks, ranks + keep, ranks + k, better);
    std::sort(ranks, ranks + keep);
    return keep;
  };
  if (role_.candidate_source) {
    // Block scores over the visible groups (m == visible here), the newest block pinned.
    const int nb = (visible + B - 1) / B;
    float* bs = score + s.max_groups;  // the block scores: the second half of the buffer
    int k = 0;
    for (int b = 0; b < nb; ++b) {
      float mx = -INFINITY;
      for (int j = b * B; j < std::min(b * B + B, visible); ++j) mx = std::max(mx, score[j]);
      bs[b] = b == nb - 1 ? INFINITY : mx;
      if (bs[b] > -INFINITY) rank[k++] = b;
    }
    const int kept = best(rank, k, sel.max_blocks, bs);
    std::copy(rank, rank + kept, sel.blocks.data() + std::int64_t(t) * sel.max_blocks);
    sel.block_count[std::size_t(t)] = kept;
  }
  int k = 0;
  for (int i = 0; i < m; ++i) {
    if (score[i] > -INFINITY) rank[k++] = i;
  }
  const int kept = best(rank, k, sel.topk, score);
  int* out = sel.groups.data() + std::int64_t(t) * sel.topk;
  for (int i = 0; i < kept; ++i) out[i] = cand[rank[i]];
  sel.count[std::size_t(t)] = kept;
}

// Token t's attention over its window and its selected groups, per head, with the sink; the
// query's rotation taken off the output.
void Csa2Block::attend(const Exec& exec, int t, int pos, const Csa2Window& window, const Csa2Source* src,
                       const Csa2Selection& sel, Csa2Scratch& s) const {
  const Csa2Shape& c = *shape_;
  const int H = c.heads, D = c.head_dim, pairs = c.rope_dim / 2, stride = c.window + c.index_topk;
  const int nw = std::min(pos + 1, c.window), first = pos + 1 - nw;
  const int ns = role_.ratio > 0 ? sel.count[std::size_t(t)] : 0;
  const int* groups = sel.groups.data() + std::int64_t(t) * sel.topk;
  const float scale = 1.0f / std::sqrt(float(D));
  const float* cs = s.latent.data() + D + c.index_head_dim + 2 * pairs;  // [cos][-sin] of pos
  exec.pool.parallel_for(H, 1, [&](std::int64_t h0, std::int64_t h1) {
    for (std::int64_t h = h0; h < h1; ++h) {
      const float* q = s.q.data() + (std::int64_t(t) * H + h) * D;
      float* lg = s.logits.data() + h * stride;
      const float sink = w_->attn_sink[std::size_t(h)];
      float mx = sink;
      for (int i = 0; i < nw; ++i) mx = std::max(mx, lg[i] = dot(q, window.row(first + i), D) * scale);
      for (int i = 0; i < ns; ++i) mx = std::max(mx, lg[nw + i] = dot(q, src->kv(groups[i]), D) * scale);
      float* o = s.attn.data() + (std::int64_t(t) * H + h) * D;
      std::fill(o, o + D, 0.0f);
      float denom = 0.0f;
      for (int i = 0; i < nw + ns; ++i) {
        const float e = std::exp(lg[i] - mx);
        denom += e;
        const float* v = i < nw ? window.row(first + i) : src->kv(groups[i - nw]);
        for (int d = 0; d < D; ++d) o[d] += e * v[d];
      }
      denom += std::exp(sink - mx);
      const float inv = 1.0f / denom;
      for (int d = 0; d < D; ++d) o[d] *= inv;
      rope_rotate(o + D - c.rope_dim, pairs, cs, cs + pairs);
    }
  });
}

// The call's projections, batched over its n tokens (x [n][hidden]).
void Csa2Block::project(const Exec& exec, const float* x, int n, Csa2Scratch& s) const {
  const Csa2Shape& c = *shape_;
  const int D = c.head_dim, IH = c.index_heads, ID = c.index_head_dim;
  const std::int64_t HD = std::int64_t(c.heads) * D, hid = c.hidden;
  matvec_tokens(exec, w_->wq_a, x, hid, n, s.q_resid.data(), c.q_lora);
  for (int t = 0; t < n; ++t) {
    float* r = s.q_resid.data() + std::int64_t(t) * c.q_lora;
    rms_norm(r, w_->q_norm.data(), c.q_lora, c.eps, r);
  }
  matvec_tokens(exec, w_->wq_b, s.q_resid.data(), c.q_lora, n, s.q.data(), HD);
  matvec_tokens(exec, w_->wkv, x, hid, n, s.kv.data(), D);
  for (int t = 0; t < n; ++t) {
    float* kv = s.kv.data() + std::int64_t(t) * D;
    rms_norm(kv, w_->kv_norm.data(), D, c.eps, kv);
  }
  if (role_.kv_source) {
    matvec_tokens(exec, w_->c_wkv, x, hid, n, s.ckv.data(), D);
    if (role_.ratio > 1) matvec_tokens(exec, w_->c_wgate, x, hid, n, s.cgate.data(), D);
  }
  if (role_.index_source) {
    matvec_tokens(exec, w_->i_wq_b, s.q_resid.data(), c.q_lora, n, s.iq.data(), std::int64_t(IH) * ID);
    matvec_tokens(exec, w_->i_weights_proj, x, hid, n, s.iw.data(), IH);
    const float inv_sqrt_h = 1.0f / std::sqrt(float(IH));
    for (int i = 0; i < n * IH; ++i) s.iw[std::size_t(i)] *= inv_sqrt_h;
  }
}

// Token t of the call at position pos: rotations, its window slot, its compressor step, its
// selection (row t), its attention (row t of s.attn).
void Csa2Block::step(const Exec& exec, int t, int pos, Csa2Window& window, Csa2Source* source, Csa2Selection& sel,
                     Csa2Scratch& s) const {
  const Csa2Shape& c = *shape_;
  const int H = c.heads, D = c.head_dim, R = c.rope_dim, pairs = R / 2, IH = c.index_heads, ID = c.index_head_dim;
  // After the latent, the key and the group's [cos][sin]: [cos][-sin][sin] of the token's position.
  float* cosv = s.latent.data() + D + ID + 2 * pairs;
  float* nsin = cosv + pairs;
  float* sinv = cosv + 2 * pairs;
  rope_angles(inv_freq_.data(), pairs, pos, cosv, sinv);
  for (int i = 0; i < pairs; ++i) nsin[i] = -sinv[i];
  float* q = s.q.data() + std::int64_t(t) * H * D;
  for (int h = 0; h < H; ++h) rope_rotate(q + std::int64_t(h) * D + D - R, pairs, cosv, sinv);
  float* kv = s.kv.data() + std::int64_t(t) * D;
  rope_rotate(kv + D - R, pairs, cosv, sinv);
  std::memcpy(window.buffer_.data() + std::int64_t(pos % window.window_) * D, kv, std::size_t(D) * sizeof(float));
  window.tokens_ = pos + 1;

  if (role_.kv_source) {
    compress(exec, s.ckv.data() + std::int64_t(t) * D, s.cgate.data() + std::int64_t(t) * D, *source, s);
  }
  if (role_.index_source) {
    // The indexer's queries always take the compress schedule (the same as the layer's here).
    float* iq = s.iq.data() + std::int64_t(t) * IH * ID;
    for (int h = 0; h < IH; ++h) rope_rotate(iq + std::int64_t(h) * ID + ID - R, pairs, cosv, sinv);
    select(exec, t, pos, *source, sel, s);
    sel.row_source[std::size_t(t)] = source;
  }
  attend(exec, t, pos, window, source, sel, s);
}

// The grouped low-rank output projection of the call's n tokens.
void Csa2Block::output(const Exec& exec, int n, Csa2Scratch& s, float* out) const {
  const Csa2Shape& c = *shape_;
  const std::int64_t HD = std::int64_t(c.heads) * c.head_dim;
  const std::int64_t gin = HD / c.o_groups, GL = std::int64_t(c.o_groups) * c.o_lora;
  for (int g = 0; g < c.o_groups; ++g) {
    const kernels::QuantMatrix wo_a_g = row_slice(w_->wo_a, std::int64_t(g) * c.o_lora, c.o_lora);
    matvec_tokens(exec, wo_a_g, s.attn.data() + g * gin, HD, n, s.olora.data() + std::int64_t(g) * c.o_lora, GL);
  }
  matvec_tokens(exec, w_->wo_b, s.olora.data(), GL, n, out, c.hidden);
}

Status Csa2Block::forward(const Exec& exec, const float* x, int n, int pos0, Csa2Window& window, Csa2Source* source,
                          Csa2Selection& sel, Csa2Scratch& s, float* out) const {
  WASTE_TRY(check_call(n, pos0, window, source, sel, s));
  project(exec, x, n, s);
  for (int t = 0; t < n; ++t) step(exec, t, pos0 + t, window, source, sel, s);
  if (role_.index_source) {
    sel.pos0 = pos0, sel.n = n, sel.source = source;
    if (role_.candidate_source) sel.cand_pos0 = pos0, sel.cand_n = n;
  }
  output(exec, n, s, out);
  return ok();
}

Status Csa2Block::check_token(int t, int pos, const Csa2Window& window, const Csa2Source* source,
                              const Csa2Selection& sel, const Csa2Scratch& s) const {
  if (pos != window.tokens()) {
    return make_error(Errc::argument, "csa2: batch token " + std::to_string(t) + " is at position " +
                                          std::to_string(pos) + " but its window holds " +
                                          std::to_string(window.tokens()) + " tokens");
  }
  if (role_.ratio == 0) return ok();
  if (source == nullptr) {
    return make_error(Errc::argument,
                      "csa2: the layer has compress ratio " + std::to_string(role_.ratio) + " but no source");
  }
  if (source->ratio() != role_.ratio) {
    return make_error(Errc::argument, "csa2: the layer's compress ratio " + std::to_string(role_.ratio) +
                                          " differs from its source's " + std::to_string(source->ratio()));
  }
  if (role_.kv_source ? source->tokens() != pos : source->tokens() <= pos) {
    return make_error(Errc::argument, "csa2: batch token " + std::to_string(t) + " is at position " +
                                          std::to_string(pos) + " but its source holds " +
                                          std::to_string(source->tokens()) + " tokens");
  }
  if (pos + 1 > source->ctx_tokens() || pos + 1 > s.max_groups) {
    return make_error(Errc::argument, "csa2: position " + std::to_string(pos) + " exceeds the source's " +
                                          std::to_string(std::min<std::int64_t>(source->ctx_tokens(), s.max_groups)) +
                                          " tokens");
  }
  if (role_.index_source && !source->has_index_keys()) {
    return make_error(Errc::argument, "csa2: the source has no index keys");
  }
  if (!role_.index_source && (sel.pos0 != Csa2Selection::kBatch || sel.row_source[std::size_t(t)] != source)) {
    return make_error(Errc::argument, "csa2: no index source has selected for batch token " + std::to_string(t));
  }
  if (role_.uses_candidates && (sel.cand_pos0 != Csa2Selection::kBatch || sel.row_source[std::size_t(t)] != source)) {
    return make_error(Errc::argument, "csa2: no candidate blocks for batch token " + std::to_string(t));
  }
  return ok();
}

Status Csa2Block::forward(const Exec& exec, const float* x, std::span<const int> positions,
                          FunctionRef<Csa2Window&(int t)> window_of, FunctionRef<Csa2Source*(int t)> source_of,
                          Csa2Selection& sel, Csa2Scratch& s, float* out) const {
  const int n = int(positions.size());
  if (n <= 0 || n > s.tokens || n > sel.tokens) {
    return make_error(Errc::argument, "csa2: " + std::to_string(n) + " tokens exceed the scratch's " +
                                          std::to_string(std::min(s.tokens, sel.tokens)));
  }
  if (!role_.index_source && role_.ratio > 0 && sel.n != n) {
    return make_error(Errc::argument,
                      "csa2: no index source has selected for this batch of " + std::to_string(n) + " tokens");
  }
  project(exec, x, n, s);
  for (int t = 0; t < n; ++t) {
    const int pos = positions[std::size_t(t)];
    Csa2Window& window = window_of(t);
    Csa2Source* source = role_.ratio > 0 ? source_of(t) : nullptr;
    WASTE_TRY(check_token(t, pos, window, source, sel, s));
    step(exec, t, pos, window, source, sel, s);
  }
  if (role_.index_source) {
    sel.pos0 = Csa2Selection::kBatch, sel.n = n, sel.source = nullptr;
    if (role_.candidate_source) sel.cand_pos0 = Csa2Selection::kBatch, sel.cand_n = n;
  }
  output(exec, n, s, out);
  return ok();
}

}  // namespace waste::forward

// The k-pool DSA indexer (kpool_indexer.hpp has the maths). A call appends its tokens one at a
// time, so token t's view is exactly the pools completed up to its own position; pools are scored
// only when a token sees more of them than it may select (dense below index_topk tokens).
#include "compute/forward/kpool_indexer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "compute/model/weights.hpp"

namespace waste::forward {
namespace {

constexpr float kKNormEps = 1e-6f;  // the indexer's k_norm LayerNorm
constexpr int kPoolRowsPerChunk = 64;

std::string dims(std::int64_t a, std::int64_t b) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
}

Status check_matrix(const char* name, const kernels::QuantMatrix& m, std::int64_t rows, std::int64_t cols) {
  if (m.payload == nullptr || m.rows != rows || m.cols != cols) {
    return make_error(Errc::format, std::string("kpool indexer: ") + name + ": expected " + dims(rows, cols) +
                                        ", found " + (m.payload == nullptr ? "none" : dims(m.rows, m.cols)));
  }
  return ok();
}

Status check_vector(const char* name, const std::vector<float>& v, std::size_t n) {
  if (v.size() != n) {
    return make_error(Errc::format, std::string("kpool indexer: ") + name + ": expected " + std::to_string(n) +
                                        " values, found " + std::to_string(v.size()));
  }
  return ok();
}

std::int64_t pools_of(const KpoolIndexerShape& shape, int ctx_tokens) { return ctx_tokens / shape.kpool; }

// LayerNorm over n values with weight and bias (biased variance), in place.
void layer_norm(float* x, const float* w, const float* b, int n) {
  float mean = 0.0f;
  for (int i = 0; i < n; ++i) mean += x[i];
  mean /= float(n);
  float var = 0.0f;
  for (int i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  const float inv = 1.0f / std::sqrt(var / float(n) + kKNormEps);
  for (int i = 0; i < n; ++i) x[i] = (x[i] - mean) * inv * w[i] + b[i];
}

}  // namespace

Result<KpoolIndexerShape> KpoolIndexerShape::make(int heads, int head_dim, int kpool, int topk, int hidden,
                                                  int q_lora, bool always_select_tail) {
  const auto positive = [](const char* key, int v) -> Status {
    if (v > 0) return ok();
    return make_error(Errc::format,
                      std::string("kpool indexer: ") + key + " must be positive, found " + std::to_string(v));
  };
  WASTE_TRY(positive("index_n_heads", heads));
  WASTE_TRY(positive("index_head_dim", head_dim));
  WASTE_TRY(positive("index_kpool", kpool));
  WASTE_TRY(positive("hidden_size", hidden));
  WASTE_TRY(positive("q_lora_rank", q_lora));
  if (topk <= 0 || topk % kpool != 0) {
    return make_error(Errc::format, "kpool indexer: index_topk (" + std::to_string(topk) +
                                        ") must be a positive multiple of index_kpool (" + std::to_string(kpool) + ")");
  }
  if (!always_select_tail) {
    return make_error(Errc::format, "kpool indexer: index_kpool_always_select_tail false is not supported");
  }
  return KpoolIndexerShape{heads, head_dim, kpool, topk, hidden, q_lora};
}

Status KpoolIndexerWeights::check(const KpoolIndexerShape& shape) const {
  const std::int64_t D = shape.head_dim;
  WASTE_TRY(check_matrix("wq_b", wq_b, std::int64_t(shape.heads) * D, shape.q_lora));
  WASTE_TRY(check_matrix("wk", wk, D, shape.hidden));
  WASTE_TRY(check_vector("k_norm.weight", k_norm_w, std::size_t(D)));
  WASTE_TRY(check_vector("k_norm.bias", k_norm_b, std::size_t(D)));
  WASTE_TRY(check_matrix("weights_proj", weights_proj, shape.heads, shape.hidden));
  WASTE_TRY(check_matrix("index_kpool_compress_gate", compress_gate, D, shape.hidden));
  WASTE_TRY(check_vector("index_kpool_compress_ape", compress_ape, std::size_t(shape.kpool) * std::size_t(D)));
  return ok();
}

std::uint64_t KpoolIndexerState::bytes(const KpoolIndexerShape& shape, int ctx_tokens) {
  const std::uint64_t floats =
      std::uint64_t(pools_of(shape, ctx_tokens) + 2 * std::int64_t(shape.kpool)) * std::uint64_t(shape.head_dim);
  return floats * sizeof(float);
}

Result<KpoolIndexerState> KpoolIndexerState::create(const KpoolIndexerShape& shape, int ctx_tokens) {
  if (ctx_tokens <= 0) {
    return make_error(Errc::argument, "kpool indexer: ctx_tokens must be positive, found " + std::to_string(ctx_tokens));
  }
  KpoolIndexerState st;
  st.ctx_tokens_ = ctx_tokens;
  st.kpool_ = shape.kpool;
  st.head_dim_ = shape.head_dim;
  st.max_pools_ = pools_of(shape, ctx_tokens);
  st.buffer_.assign(bytes(shape, ctx_tokens) / sizeof(float), 0.0f);
  return st;
}

std::uint64_t KpoolIndexerScratch::bytes(const KpoolIndexerShape& shape, int ctx_tokens, int tokens) {
  const std::uint64_t T = std::uint64_t(tokens), H = std::uint64_t(shape.heads), D = std::uint64_t(shape.head_dim);
  const std::uint64_t P = std::uint64_t(std::max<std::int64_t>(pools_of(shape, ctx_tokens), 1));
  const std::uint64_t floats = T * H * D + 2 * T * D + T * H + H * P + P;
  const std::uint64_t ints = P + T * std::uint64_t(shape.max_selected()) + T;
  return floats * sizeof(float) + ints * sizeof(int);
}

void KpoolIndexerScratch::resize(const KpoolIndexerShape& shape, int ctx_tokens, int n_tokens) {
  tokens = n_tokens;
  max_pools = std::max<std::int64_t>(pools_of(shape, ctx_tokens), 1);
  const std::size_t T = std::size_t(n_tokens), H = std::size_t(shape.heads), D = std::size_t(shape.head_dim);
  const std::size_t P = std::size_t(max_pools);
  q.assign(T * H * D, 0.0f);
  k.assign(T * D, 0.0f);
  gate.assign(T * D, 0.0f);
  w.assign(T * H, 0.0f);
  dots.assign(H * P, 0.0f);
  score.assign(P, 0.0f);
  order.assign(P, 0);
  positions.assign(T * std::size_t(shape.max_selected()), 0);
  counts.assign(T, 0);
}

std::uint64_t KpoolIndexerScratch::allocated_bytes() const {
  return (q.capacity() + k.capacity() + gate.capacity() + w.capacity() + dots.capacity() + score.capacity()) *
             sizeof(float) +
         (order.capacity() + positions.capacity() + counts.capacity()) * sizeof(int);
}

Result<KpoolIndexer> KpoolIndexer::bind(const KpoolIndexerShape& shape, const KpoolIndexerWeights& weights) {
  WASTE_TRY(weights.check(shape));
  return KpoolIndexer(shape, weights);
}

// Token k, gate rows into the pool being filled; a full pool becomes its key:
// K[c] = sum_j softmax_j(gate_j[c] + ape_j[c]) k_j[c].
void KpoolIndexer::append(const float* k, const float* gate, KpoolIndexerState& st) const {
  const int D = shape_.head_dim, kp = shape_.kpool;
  float* partial_k = st.buffer_.data() + st.max_pools_ * D;
  float* partial_g = partial_k + std::int64_t(kp) * D;
  const int j = st.tokens_ % kp;
  std::memcpy(partial_k + std::int64_t(j) * D, k, std::size_t(D) * sizeof(float));
  std::memcpy(partial_g + std::int64_t(j) * D, gate, std::size_t(D) * sizeof(float));
  ++st.tokens_;
  if (j != kp - 1) return;
  float* key = st.buffer_.data() + std::int64_t(st.tokens_ / kp - 1) * D;
  const float* ape = w_->compress_ape.data();
  for (int c = 0; c < D; ++c) {
    float max_logit = -INFINITY;
    for (int i = 0; i < kp; ++i) max_logit = std::max(max_logit, partial_g[i * D + c] + ape[i * D + c]);
    float sum = 0.0f, acc = 0.0f;
    for (int i = 0; i < kp; ++i) {
      const float e = std::exp(partial_g[i * D + c] + ape[i * D + c] - max_logit);
      sum += e;
      acc += e * partial_k[i * D + c];
    }
    key[c] = acc / sum;
  }
}

// The positions token `pos` attends, with the state holding tokens 0..pos.
void KpoolIndexer::select_token(const Exec& exec, const float* q, const float* w, int pos,
                                const KpoolIndexerState& st, KpoolIndexerScratch& s, int* positions,
                                int* count) const {
  const int H = shape_.heads, D = shape_.head_dim, kp = shape_.kpool, keep = shape_.select_pools();
  const int pools = (pos + 1) / kp;  // complete pools, each ending at or before pos
  int n = 0;
  if (pools <= keep) {  // every pool is selected: dense
    for (int u = 0; u < pools * kp; ++u) positions[n++] = u;
  } else {
    // dots[h][p] = q_h . K_p, then score(p) = sum_h w_h relu(dots[h][p] / sqrt(D)).
    const kernels::QuantMatrix keys{reinterpret_cast<const std::uint8_t*>(st.pool_keys()), nullptr, pools, D,
                                    std::int64_t(D) * std::int64_t(sizeof(float)), 128, 0};
    const float inv_sqrt_d = 1.0f / std::sqrt(float(D));
    const auto* kt = &exec.kernels;
    exec.pool.parallel_for(pools, kPoolRowsPerChunk, [&](std::int64_t p_begin, std::int64_t p_end) {
      kt->matmul(keys, q, D, H, s.dots.data(), s.max_pools, p_begin, p_end);
      for (std::int64_t p = p_begin; p < p_end; ++p) {
        float total = 0.0f;
        for (int h = 0; h < H; ++h) total += w[h] * std::max(s.dots[std::size_t(h * s.max_pools + p)] * inv_sqrt_d, 0.0f);
        s.score[std::size_t(p)] = std::isnan(total) ? -INFINITY : total;  // a strict order for the ranking
      }
    });
    // The `keep` best pools (higher score first, the lower index on a tie), then ascending.
    int* order = s.order.data();
    for (int p = 0; p < pools; ++p) order[p] = p;
    const float* score = s.score.data();
    const auto better = [score](int a, int b) { return score[a] > score[b] || (score[a] == score[b] && a < b); };
    std::nth_element(order, order + keep, order + pools, better);
    std::sort(order, order + keep);
    for (int i = 0; i < keep; ++i) {
      for (int j = 0; j < kp; ++j) positions[n++] = order[i] * kp + j;
    }
  }
  for (int u = pools * kp; u <= pos; ++u) positions[n++] = u;  // the unfilled tail
  *count = n;
}

Status KpoolIndexer::check_call(int n, int pos0, const KpoolIndexerState& state,
                                const KpoolIndexerScratch& s) const {
  if (pos0 != state.tokens()) {
    return make_error(Errc::argument, "kpool indexer: the call starts at position " + std::to_string(pos0) +
                                          " but the state holds " + std::to_string(state.tokens()) + " tokens");
  }
  if (n <= 0 || n > s.tokens) {
    return make_error(Errc::argument, "kpool indexer: " + std::to_string(n) + " tokens exceed the scratch's " +
                                          std::to_string(s.tokens));
  }
  if (pos0 + n > state.ctx_tokens() || (pos0 + n) / shape_.kpool > s.max_pools) {
    return make_error(Errc::argument, "kpool indexer: position " + std::to_string(pos0 + n - 1) +
                                          " exceeds the state's " + std::to_string(state.ctx_tokens()) + " tokens");
  }
  return ok();
}

Status KpoolIndexer::select(const Exec& exec, const float* x, const float* q_resid, int n, int pos0,
                            KpoolIndexerState& state, KpoolIndexerScratch& s, int first_row) const {
  WASTE_TRY(check_call(n, pos0, state, s));
  if (first_row < 0 || first_row + n > s.tokens) {
    return make_error(Errc::argument, "kpool indexer: rows " + std::to_string(first_row) + ".." +
                                          std::to_string(first_row + n) + " exceed the scratch's " +
                                          std::to_string(s.tokens) + " tokens");
  }
  const int H = shape_.heads, D = shape_.head_dim, stride = shape_.max_selected();
  const std::int64_t hid = shape_.hidden;
  matvec_tokens(exec, w_->wk, x, hid, n, s.k.data(), D);
  matvec_tokens(exec, w_->compress_gate, x, hid, n, s.gate.data(), D);
  for (int t = 0; t < n; ++t) {
    layer_norm(s.k.data() + std::int64_t(t) * D, w_->k_norm_w.data(), w_->k_norm_b.data(), D);
  }
  // Queries and head weights only when some token of the call has pools to rank.
  if ((pos0 + n) / shape_.kpool > shape_.select_pools()) {
    matvec_tokens(exec, w_->wq_b, q_resid, shape_.q_lora, n, s.q.data(), std::int64_t(H) * D);
    matvec_tokens(exec, w_->weights_proj, x, hid, n, s.w.data(), H);
    const float inv_sqrt_h = 1.0f / std::sqrt(float(H));
    for (int i = 0; i < n * H; ++i) s.w[std::size_t(i)] *= inv_sqrt_h;
  }
  for (int t = 0; t < n; ++t) {
    append(s.k.data() + std::int64_t(t) * D, s.gate.data() + std::int64_t(t) * D, state);
    select_token(exec, s.q.data() + std::int64_t(t) * H * D, s.w.data() + std::int64_t(t) * H, pos0 + t, state, s,
                 s.positions.data() + std::int64_t(first_row + t) * stride, s.counts.data() + first_row + t);
  }
  return ok();
}

namespace {

Status check_mla(const ModelConfig& c, const KpoolIndexerShape& shape) {
  if (c.hidden != shape.hidden || c.q_lora != shape.q_lora) {
    return make_error(Errc::argument, "kpool indexer: the MLA's hidden_size " + std::to_string(c.hidden) +
                                          " / q_lora_rank " + std::to_string(c.q_lora) + " differ from the indexer's " +
                                          std::to_string(shape.hidden) + " / " + std::to_string(shape.q_lora));
  }
  return ok();
}

}  // namespace

Status mla_forward_kpool(const Exec& exec, const ModelConfig& c, const model::MlaWeights& w,
                         const KpoolIndexer& indexer, const float* x, int n_tokens, int pos0, float* latent_cache,
                         MlaScratch& s, KpoolIndexerState& state, KpoolIndexerScratch& is, float* out) {
  WASTE_TRY(check_mla(c, indexer.shape()));
  WASTE_TRY(indexer.check_call(n_tokens, pos0, state, is));
  Status status = ok();
  auto pick = [&](const float* q_resid, int n) {
    status = indexer.select(exec, x, q_resid, n, pos0, state, is);
    if (!status) std::fill(is.counts.begin(), is.counts.end(), 0);
    return MlaPositions{is.positions.data(), is.counts.data(), indexer.shape().max_selected()};
  };
  const MlaSelect select(pick);
  mla_forward(exec, c, w, x, n_tokens, pos0, latent_cache, s, out, &select);
  return status;
}

Status mla_forward_kpool(const Exec& exec, const ModelConfig& c, const model::MlaWeights& w,
                         const KpoolIndexer& indexer, const float* x, std::span<const TokenSeq> seqs, int layer,
                         MlaScratch& s, FunctionRef<KpoolIndexerState&(int t)> state_of, KpoolIndexerScratch& is,
                         float* out) {
  WASTE_TRY(check_mla(c, indexer.shape()));
  const int n = int(seqs.size());
  if (n > is.tokens) {
    return make_error(Errc::argument, "kpool indexer: " + std::to_string(n) + " tokens exceed the scratch's " +
                                          std::to_string(is.tokens));
  }
  Status status = ok();
  auto pick = [&](const float* q_resid, int n_tokens) {
    for (int t = 0; t < n_tokens && status; ++t) {
      status = indexer.select(exec, x + std::int64_t(t) * c.hidden, q_resid + std::int64_t(t) * c.q_lora, 1,
                              seqs[std::size_t(t)].pos, state_of(t), is, t);
    }
    if (!status) std::fill(is.counts.begin(), is.counts.end(), 0);
    return MlaPositions{is.positions.data(), is.counts.data(), indexer.shape().max_selected()};
  };
  const MlaSelect select(pick);
  mla_forward(exec, c, w, x, seqs, layer, s, out, &select);
  return status;
}

}  // namespace waste::forward

// GLM's k-pool DSA indexer (compute/forward/kpool_indexer.*) and MLA over a selection: while a
// token sees no more pools than it may keep, it attends every position and the output is dense
// MLA's bit for bit; past that, topk/kpool pools plus the tail; bad shapes, weights and calls are
// refused with messages naming the thing. Values against the float64 oracle:
// tests/reference/indexer_oracle.py.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <nlohmann/json.hpp>
#include <vector>

#include "compute/forward/kpool_indexer.hpp"
#include "compute/forward/mla.hpp"
#include "compute/forward/token_seq.hpp"
#include "compute/model/run_state.hpp"
#include "compute/kernels/kernels.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "shared/container/model_config.hpp"

using namespace waste;

namespace {

constexpr int kHidden = 64, kQLora = 32, kKvLora = 32, kHeads = 4, kNope = 16, kRope = 8, kV = 16;

// Deterministic values in [-scale, scale).
struct Lcg {
  std::uint64_t s;
  float next(float scale) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float((s >> 40) & 0xffffff) / float(1 << 23) - 1.0f) * scale;
  }
};

// F32 matrices and vectors whose storage outlives the views.
struct Store {
  Lcg rng{11};
  std::deque<std::vector<float>> blocks;
  kernels::QuantMatrix matrix(std::int64_t rows, std::int64_t cols) {
    auto& b = blocks.emplace_back(std::size_t(rows * cols));
    for (float& v : b) v = rng.next(1.0f / float(cols) * 2.0f);
    return kernels::QuantMatrix{reinterpret_cast<const std::uint8_t*>(b.data()), nullptr, rows, cols,
                                cols * std::int64_t(sizeof(float)), 128, 0};
  }
  std::vector<float> vec(std::size_t n, float base, float spread) {
    std::vector<float> v(n);
    for (float& x : v) x = base + rng.next(spread);
    return v;
  }
};

ModelConfig mla_config() {
  auto c = ModelConfig::from_json({{"num_hidden_layers", 1},   {"hidden_size", kHidden},  {"vocab_size", 16},
                                   {"num_attention_heads", kHeads}, {"intermediate_size", 16}, {"kv_lora_rank", kKvLora},
                                   {"q_lora_rank", kQLora},     {"qk_nope_head_dim", kNope}, {"qk_rope_head_dim", kRope},
                                   {"v_head_dim", kV},          {"mla_use_nope", true}});
  REQUIRE(c);
  return *c;
}

model::MlaWeights mla_weights(Store& st) {
  model::MlaWeights w;
  w.q_a = st.matrix(kQLora, kHidden);
  w.q_a_norm = st.vec(kQLora, 1.0f, 0.1f);
  w.q_b = st.matrix(kHeads * (kNope + kRope), kQLora);
  w.kv_a = st.matrix(kKvLora + kRope, kHidden);
  w.kv_a_norm = st.vec(kKvLora, 1.0f, 0.1f);
  w.kv_b = st.matrix(kHeads * (kNope + kV), kKvLora);
  w.o_proj = st.matrix(kHidden, kHeads * kV);
  return w;
}

forward::KpoolIndexerWeights indexer_weights(Store& st, const forward::KpoolIndexerShape& s) {
  forward::KpoolIndexerWeights w;
  w.wq_b = st.matrix(std::int64_t(s.heads) * s.head_dim, s.q_lora);
  w.wk = st.matrix(s.head_dim, s.hidden);
  w.k_norm_w = st.vec(std::size_t(s.head_dim), 1.0f, 0.1f);
  w.k_norm_b = st.vec(std::size_t(s.head_dim), 0.0f, 0.1f);
  w.weights_proj = st.matrix(s.heads, s.hidden);
  w.compress_gate = st.matrix(s.head_dim, s.hidden);
  w.compress_ape = st.vec(std::size_t(s.kpool * s.head_dim), 0.0f, 0.5f);
  return w;
}

forward::KpoolIndexerShape shape_with_topk(int topk) {
  auto s = forward::KpoolIndexerShape::make(4, 16, 4, topk, kHidden, kQLora);
  REQUIRE(s);
  return *s;
}

// Runs `tokens` inputs through mla_forward_kpool in calls of `chunk`; returns the outputs and
// appends each token's positions to `selected`.
std::vector<float> run_indexed(const ModelConfig& c, const model::MlaWeights& mw, const forward::KpoolIndexer& ix,
                               const std::vector<float>& xs, int tokens, int chunk,
                               std::vector<std::vector<int>>& selected, std::vector<float>& cache) {
  ThreadPool pool(2);
  forward::Exec exec{pool, kernels::active()};
  forward::MlaScratch ms;
  ms.resize(c, tokens, chunk);
  forward::KpoolIndexerScratch is;
  is.resize(ix.shape(), tokens, chunk);
  auto state = forward::KpoolIndexerState::create(ix.shape(), tokens);
  REQUIRE(state);
  cache.assign(std::size_t(tokens) * (kKvLora + kRope), 0.0f);
  std::vector<float> out(std::size_t(tokens) * kHidden);
  for (int pos0 = 0; pos0 < tokens; pos0 += chunk) {
    const int n = std::min(chunk, tokens - pos0);
    auto st = forward::mla_forward_kpool(exec, c, mw, ix, xs.data() + pos0 * kHidden, n, pos0, cache.data(), ms,
                                         *state, is, out.data() + pos0 * kHidden);
    INFO((st ? std::string() : st.error().message));
    REQUIRE(st);
    for (int t = 0; t < n; ++t) {
      const int* p = is.positions.data() + std::int64_t(t) * ix.shape().max_selected();
      selected.emplace_back(p, p + is.counts[std::size_t(t)]);
    }
  }
  CHECK(state->tokens() == tokens);
  return out;
}

std::vector<float> inputs(int tokens) {
  Lcg rng{5};
  std::vector<float> xs(std::size_t(tokens) * kHidden);
  for (float& v : xs) v = rng.next(1.0f);
  return xs;
}

}  // namespace

TEST_CASE("kpool indexer with topk covering every pool attends all positions, bit for bit dense MLA",
          "[compute][forward][indexer]") {
  const ModelConfig c = mla_config();
  Store st;
  const model::MlaWeights mw = mla_weights(st);
  const int tokens = 26;
  const auto shape = shape_with_topk(24);  // 6 pools kept; 26 tokens make 6 complete pools
  const auto iw = indexer_weights(st, shape);
  auto ix = forward::KpoolIndexer::bind(shape, iw);
  REQUIRE(ix);
  const std::vector<float> xs = inputs(tokens);

  // Dense MLA, token by token, no selection.
  ThreadPool pool(2);
  forward::Exec exec{pool, kernels::active()};
  forward::MlaScratch ms;
  ms.resize(c, tokens, 1);
  std::vector<float> dense_cache(std::size_t(tokens) * (kKvLora + kRope), 0.0f);
  std::vector<float> dense(std::size_t(tokens) * kHidden);
  for (int pos = 0; pos < tokens; ++pos) {
    forward::mla_forward(exec, c, mw, xs.data() + pos * kHidden, 1, pos, dense_cache.data(), ms,
                         dense.data() + pos * kHidden);
  }
  for (int chunk : {1, 5, 26}) {
    INFO("calls of " << chunk << " tokens");
    std::vector<std::vector<int>> selected;
    std::vector<float> cache;
    const std::vector<float> out = run_indexed(c, mw, *ix, xs, tokens, chunk, selected, cache);
    REQUIRE(selected.size() == std::size_t(tokens));
    for (int t = 0; t < tokens; ++t) {
      std::vector<int> all(std::size_t(t) + 1);
      for (int u = 0; u <= t; ++u) all[std::size_t(u)] = u;
      CHECK(selected[std::size_t(t)] == all);
    }
    CHECK(std::memcmp(out.data(), dense.data(), out.size() * sizeof(float)) == 0);
    CHECK(cache == dense_cache);
  }
}

TEST_CASE("kpool indexer past topk keeps topk over kpool pools plus the tail, the same for any chunking",
          "[compute][forward][indexer]") {
  const ModelConfig c = mla_config();
  Store st;
  const model::MlaWeights mw = mla_weights(st);
  const int tokens = 45;
  const auto shape = shape_with_topk(8);  // 2 pools kept
  const auto iw = indexer_weights(st, shape);
  auto ix = forward::KpoolIndexer::bind(shape, iw);
  REQUIRE(ix);
  const std::vector<float> xs = inputs(tokens);
  std::vector<std::vector<int>> by_token, by_chunk;
  std::vector<float> cache_a, cache_b;
  const std::vector<float> a = run_indexed(c, mw, *ix, xs, tokens, 1, by_token, cache_a);
  const std::vector<float> b = run_indexed(c, mw, *ix, xs, tokens, 13, by_chunk, cache_b);
  CHECK(by_token == by_chunk);
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  for (int t = 0; t < tokens; ++t) {
    const std::vector<int>& p = by_token[std::size_t(t)];
    const int pools = (t + 1) / 4, tail = (t + 1) % 4;
    INFO("token " << t);
    CHECK(int(p.size()) == (pools <= 2 ? t + 1 : 8 + tail));
    CHECK(std::is_sorted(p.begin(), p.end()));
    CHECK(std::adjacent_find(p.begin(), p.end()) == p.end());
    CHECK(p.back() <= t);
    if (tail > 0 || pools <= 2) CHECK(p.back() == t);  // else t's own pool competes like the others
    for (std::size_t i = 0; i + tail < p.size(); i += 4) {  // whole pools, aligned
      CHECK(p[i] % 4 == 0);
      CHECK(p[i + 3] == p[i] + 3);
    }
  }
}

TEST_CASE("kpool indexer in a batch of two sequences gives each the bits it gets alone",
          "[compute][forward][indexer]") {
  const ModelConfig c = mla_config();
  Store st;
  const model::MlaWeights mw = mla_weights(st);
  const auto shape = shape_with_topk(8);
  const auto iw = indexer_weights(st, shape);
  auto ix = forward::KpoolIndexer::bind(shape, iw);
  REQUIRE(ix);
  const int ta = 30, tb = 21;
  const std::vector<float> xa = inputs(ta);
  std::vector<float> xb = inputs(tb);
  for (float& v : xb) v = -0.5f * v;
  std::vector<std::vector<int>> sel_a, sel_b;
  std::vector<float> cache_a, cache_b;
  const std::vector<float> alone_a = run_indexed(c, mw, *ix, xa, ta, 1, sel_a, cache_a);
  const std::vector<float> alone_b = run_indexed(c, mw, *ix, xb, tb, 1, sel_b, cache_b);

  auto ra = model::RunState::create(c, ta), rb = model::RunState::create(c, tb);
  REQUIRE(ra);
  REQUIRE(rb);
  auto sa = forward::KpoolIndexerState::create(shape, ta), sb = forward::KpoolIndexerState::create(shape, tb);
  REQUIRE(sa);
  REQUIRE(sb);
  ThreadPool pool(2);
  forward::Exec exec{pool, kernels::active()};
  forward::MlaScratch ms;
  ms.resize(c, ta, 2);
  forward::KpoolIndexerScratch is;
  is.resize(shape, ta, 2);
  std::vector<float> out_a(alone_a.size()), out_b(alone_b.size());
  for (int t = 0; t < ta; ++t) {
    std::vector<forward::TokenSeq> seqs{{&*ra, t}};
    std::vector<float> x(xa.begin() + t * kHidden, xa.begin() + (t + 1) * kHidden);
    if (t < tb) {
      seqs.push_back({&*rb, t});
      x.insert(x.end(), xb.begin() + t * kHidden, xb.begin() + (t + 1) * kHidden);
    }
    std::vector<float> out(x.size());
    auto state_of = [&](int i) -> forward::KpoolIndexerState& { return i == 0 ? *sa : *sb; };
    auto done = forward::mla_forward_kpool(exec, c, mw, *ix, x.data(), seqs, 0, ms, state_of, is, out.data());
    INFO("step " << t << (done ? std::string() : ": " + done.error().message));
    REQUIRE(done);
    std::copy_n(out.begin(), kHidden, out_a.begin() + t * kHidden);
    if (t < tb) std::copy_n(out.begin() + kHidden, kHidden, out_b.begin() + t * kHidden);
    const int* p = is.positions.data();
    CHECK(std::vector<int>(p, p + is.counts[0]) == sel_a[std::size_t(t)]);
  }
  CHECK(std::memcmp(out_a.data(), alone_a.data(), out_a.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(out_b.data(), alone_b.data(), out_b.size() * sizeof(float)) == 0);
  CHECK(sa->tokens() == ta);
  CHECK(sb->tokens() == tb);
}

TEST_CASE("kpool indexer refuses bad shapes, weights and calls with exact messages", "[compute][forward][indexer]") {
  using forward::KpoolIndexerShape;
  CHECK(KpoolIndexerShape::make(0, 16, 4, 16, 64, 32).error().message ==
        "kpool indexer: index_n_heads must be positive, found 0");
  CHECK(KpoolIndexerShape::make(4, 16, 0, 16, 64, 32).error().message ==
        "kpool indexer: index_kpool must be positive, found 0");
  CHECK(KpoolIndexerShape::make(4, 16, 4, 16, 64, 0).error().message ==
        "kpool indexer: q_lora_rank must be positive, found 0");
  CHECK(KpoolIndexerShape::make(4, 16, 4, 10, 64, 32).error().message ==
        "kpool indexer: index_topk (10) must be a positive multiple of index_kpool (4)");
  CHECK(KpoolIndexerShape::make(4, 16, 4, 16, 64, 32, false).error().message ==
        "kpool indexer: index_kpool_always_select_tail false is not supported");

  const auto shape = shape_with_topk(16);
  Store st;
  auto iw = indexer_weights(st, shape);
  iw.wk = st.matrix(16, 63);
  CHECK(forward::KpoolIndexer::bind(shape, iw).error().message == "kpool indexer: wk: expected [16, 64], found [16, 63]");
  iw = indexer_weights(st, shape);
  iw.k_norm_b.pop_back();
  CHECK(forward::KpoolIndexer::bind(shape, iw).error().message ==
        "kpool indexer: k_norm.bias: expected 16 values, found 15");
  iw = indexer_weights(st, shape);
  iw.compress_gate = kernels::QuantMatrix{};
  CHECK(forward::KpoolIndexer::bind(shape, iw).error().message ==
        "kpool indexer: index_kpool_compress_gate: expected [16, 64], found none");
  CHECK(forward::KpoolIndexerState::create(shape, 0).error().message ==
        "kpool indexer: ctx_tokens must be positive, found 0");

  iw = indexer_weights(st, shape);
  auto ix = forward::KpoolIndexer::bind(shape, iw);
  REQUIRE(ix);
  auto state = forward::KpoolIndexerState::create(shape, 8);
  REQUIRE(state);
  forward::KpoolIndexerScratch is;
  is.resize(shape, 8, 4);
  CHECK(ix->check_call(1, 5, *state, is).error().message ==
        "kpool indexer: the call starts at position 5 but the state holds 0 tokens");
  CHECK(ix->check_call(5, 0, *state, is).error().message == "kpool indexer: 5 tokens exceed the scratch's 4");
  state->set_tokens(6);
  CHECK(ix->check_call(3, 6, *state, is).error().message == "kpool indexer: position 8 exceeds the state's 8 tokens");

  // An MLA whose q_lora differs from the indexer's: refused before anything is written.
  auto other = ModelConfig::from_json({{"num_hidden_layers", 1}, {"hidden_size", kHidden}, {"vocab_size", 16},
                                       {"num_attention_heads", kHeads}, {"intermediate_size", 16},
                                       {"kv_lora_rank", kKvLora}, {"qk_nope_head_dim", kNope},
                                       {"qk_rope_head_dim", kRope}, {"v_head_dim", kV}, {"mla_use_nope", true}});
  REQUIRE(other);
  ThreadPool pool(1);
  forward::Exec exec{pool, kernels::active()};
  forward::MlaScratch ms;
  ms.resize(*other, 8, 1);
  std::vector<float> cache(8 * (kKvLora + kRope), 1.0f), x(kHidden, 0.5f), out(kHidden, 2.0f);
  state->reset();
  const auto mw = mla_weights(st);
  auto refused = forward::mla_forward_kpool(exec, *other, mw, *ix, x.data(), 1, 0, cache.data(), ms, *state, is,
                                            out.data());
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message == "kpool indexer: the MLA's hidden_size 64 / q_lora_rank 0 differ from the indexer's 64 / 32");
  CHECK(state->tokens() == 0);
  CHECK(cache == std::vector<float>(8 * (kKvLora + kRope), 1.0f));
  CHECK(out == std::vector<float>(kHidden, 2.0f));
}

TEST_CASE("kpool indexer state is 128 bytes per token at GLM's shape", "[compute][forward][indexer]") {
  auto glm = forward::KpoolIndexerShape::make(32, 128, 4, 2048, 4096, 1536);
  REQUIRE(glm);
  CHECK(glm->select_pools() == 512);
  CHECK(glm->max_selected() == 2051);
  CHECK(forward::KpoolIndexerState::bytes(*glm, 8192) - forward::KpoolIndexerState::bytes(*glm, 4096) == 4096 * 128);
  CHECK(forward::KpoolIndexerState::bytes(*glm, 4096) == (1024 + 8) * 128 * 4);
  auto state = forward::KpoolIndexerState::create(*glm, 4096);
  REQUIRE(state);
  CHECK(state->allocated_bytes() == forward::KpoolIndexerState::bytes(*glm, 4096));
  forward::KpoolIndexerScratch is;
  is.resize(*glm, 4096, 2);
  CHECK(is.allocated_bytes() == forward::KpoolIndexerScratch::bytes(*glm, 4096, 2));
}

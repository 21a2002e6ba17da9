// DeepSeek-V4.1's CSA2 attention block (compute/forward/csa2.*): shapes, roles, weights and calls
// refused with messages naming the thing; hand-worked cases: the sink's share of the softmax,
// the window ring, the gated pooling of a group and its rotation, a partial group carried across
// calls, the lower index winning ties in both top-k levels; the same bits for any thread count,
// chunking, batch or save and restore; quantized wo_a row groups. Values against the float64 oracle:
// tests/reference/csa2_oracle.py.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "compute/forward/csa2.hpp"
#include "compute/forward/rope.hpp"
#include "compute/kernels/kernels.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "test_kernels_fixtures.hpp"

using namespace waste;
using forward::Csa2Block;
using forward::Csa2Role;
using forward::Csa2Selection;
using forward::Csa2Shape;
using forward::Csa2Source;
using forward::Csa2Weights;
using forward::Csa2Window;

namespace {

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
  Lcg rng{7};
  std::deque<std::vector<float>> blocks;
  kernels::QuantMatrix matrix(std::int64_t rows, std::int64_t cols, float scale = -1.0f) {
    auto& b = blocks.emplace_back(std::size_t(rows * cols));
    const float s = scale >= 0.0f ? scale : 2.0f / std::sqrt(float(cols));
    for (float& v : b) v = rng.next(s);
    return view(b, rows, cols);
  }
  static kernels::QuantMatrix view(const std::vector<float>& b, std::int64_t rows, std::int64_t cols) {
    return kernels::QuantMatrix{reinterpret_cast<const std::uint8_t*>(b.data()), nullptr, rows, cols,
                                cols * std::int64_t(sizeof(float)), 128, 0};
  }
  std::vector<float> vec(std::size_t n, float base, float spread) {
    std::vector<float> v(n);
    for (float& x : v) x = base + rng.next(spread);
    return v;
  }
  std::vector<float>& data(const kernels::QuantMatrix& m) {
    for (auto& b : blocks) {
      if (reinterpret_cast<const std::uint8_t*>(b.data()) == m.payload) return b;
    }
    FAIL("not a stored matrix");
    return blocks.front();
  }
};

Csa2Shape small_shape() {
  Csa2Shape s;
  s.hidden = 16, s.heads = 2, s.head_dim = 8, s.rope_dim = 4, s.q_lora = 8, s.o_groups = 2, s.o_lora = 4;
  s.window = 4, s.index_heads = 2, s.index_head_dim = 8, s.index_topk = 2, s.candidate_blocks = 2;
  s.candidate_block_size = 2;
  s.main_rope = RopeConfig{.enabled = true, .theta = 10000.0};
  s.compress_rope = RopeConfig{.enabled = true, .theta = 160000.0, .yarn = true, .factor = 16.0,
                               .original_max_pos = 65536, .beta_fast = 32.0, .beta_slow = 1.0};
  return s;
}

Csa2Weights make_weights(Store& st, const Csa2Shape& c, const Csa2Role& role) {
  Csa2Weights w;
  const std::int64_t HD = std::int64_t(c.heads) * c.head_dim;
  w.wq_a = st.matrix(c.q_lora, c.hidden);
  w.q_norm = st.vec(std::size_t(c.q_lora), 1.0f, 0.1f);
  w.wq_b = st.matrix(HD, c.q_lora);
  w.wkv = st.matrix(c.head_dim, c.hidden);
  w.kv_norm = st.vec(std::size_t(c.head_dim), 1.0f, 0.1f);
  w.wo_a = st.matrix(std::int64_t(c.o_groups) * c.o_lora, HD / c.o_groups);
  w.wo_b = st.matrix(c.hidden, std::int64_t(c.o_groups) * c.o_lora);
  w.attn_sink = st.vec(std::size_t(c.heads), 0.0f, 1.0f);
  if (role.kv_source) {
    w.c_wkv = st.matrix(c.head_dim, c.hidden);
    if (role.ratio > 1) w.c_wgate = st.matrix(c.head_dim, c.hidden);
    w.c_norm = st.vec(std::size_t(c.head_dim), 1.0f, 0.1f);
  }
  if (role.index_source) {
    w.i_wq_b = st.matrix(std::int64_t(c.index_heads) * c.index_head_dim, c.q_lora);
    w.i_weights_proj = st.matrix(c.index_heads, c.hidden);
    if (role.kv_source) {
      w.i_wk = st.matrix(c.index_head_dim, c.head_dim);
      w.i_k_norm = st.vec(std::size_t(c.index_head_dim), 1.0f, 0.1f);
    }
  }
  return w;
}

struct Env {
  ThreadPool pool{2};
  forward::Exec exec{pool, kernels::active()};
};

std::vector<float> inputs(Store& st, int tokens, int hidden) {
  std::vector<float> x(std::size_t(tokens) * std::size_t(hidden));
  for (float& v : x) v = st.rng.next(1.0f);
  return x;
}

// A window-only layer run over x in calls of `chunk` tokens; the outputs.
std::vector<float> run_window_layer(Env& env, const Csa2Shape& c, const Csa2Weights& w, const std::vector<float>& x,
                                    int tokens, int chunk = 1) {
  auto block = Csa2Block::bind(c, Csa2Role{}, w);
  REQUIRE(block);
  auto window = Csa2Window::create(c);
  REQUIRE(window);
  forward::Csa2Scratch s;
  s.resize(c, tokens, chunk);
  Csa2Selection sel;
  sel.resize(c, chunk);
  std::vector<float> out(std::size_t(tokens) * std::size_t(c.hidden));
  for (int p = 0; p < tokens; p += chunk) {
    const int n = std::min(chunk, tokens - p);
    auto st = block->forward(env.exec, x.data() + std::int64_t(p) * c.hidden, n, p, *window, nullptr, sel, s,
                             out.data() + std::int64_t(p) * c.hidden);
    REQUIRE(st);
  }
  return out;
}

template <class R>
std::string message(const R& r) {
  return r ? std::string("ok") : r.error().message;
}

}  // namespace

TEST_CASE("csa2: shapes, roles and weights are checked with messages naming the key", "[csa2]") {
  Csa2Shape c = small_shape();
  CHECK(message(c.check()) == "ok");
  c.heads = 6, c.o_groups = 4;
  CHECK(message(c.check()) == "csa2: num_attention_heads (6) must be a multiple of o_groups (4)");
  c = small_shape();
  c.rope_dim = 7;
  CHECK(message(c.check()) ==
        "csa2: qk_rope_head_dim (7) must be even and at most head_dim (8) and index_head_dim (8)");
  c = small_shape();
  c.index_topk = 0;
  CHECK(message(c.check()) == "csa2: index_topk must be positive, found 0");

  CHECK(message(Csa2Role{.ratio = 0, .kv_source = true}.check()) == "csa2: a KV source needs a compress ratio above 0");
  CHECK(message(Csa2Role{.ratio = -1}.check()) == "csa2: compress ratio -1 is negative");
  CHECK(message(Csa2Role{.ratio = 1, .candidate_source = true}.check()) ==
        "csa2: the candidate source must be an index source");
  const Csa2Role both{.ratio = 1, .index_source = true, .candidate_source = true, .uses_candidates = true};
  CHECK(message(both.check()) ==
        "csa2: only an index source other than the candidate source uses candidates");

  Store st;
  c = small_shape();
  const Csa2Role source{.ratio = 2, .kv_source = true, .index_source = true};
  Csa2Weights w = make_weights(st, c, source);
  CHECK(message(w.check(c, source)) == "ok");
  Csa2Weights bad = w;
  bad.wq_a.cols = 15;
  CHECK(message(bad.check(c, source)) == "csa2: wq_a: expected [8, 16], found [8, 15]");
  bad = w;
  bad.c_wgate = {};
  CHECK(message(bad.check(c, source)) == "csa2: compressor.wgate: expected [8, 16], found none");
  // ratio 1: no gate
  CHECK(message(bad.check(c, Csa2Role{.ratio = 1, .kv_source = true, .index_source = true})) == "ok");
  bad = w;
  bad.attn_sink.pop_back();
  CHECK(message(bad.check(c, source)) == "csa2: attn_sink: expected 2 values, found 1");
  bad = w;
  bad.i_wk = {};
  CHECK(message(bad.check(c, source)) == "csa2: indexer.wk: expected [8, 8], found none");
  // a reindex source reads its KV source's keys
  CHECK(message(bad.check(c, Csa2Role{.ratio = 2, .index_source = true})) == "ok");
  auto block = Csa2Block::bind(c, source, bad);
  REQUIRE(!block);
  CHECK(block.error().message == "csa2: indexer.wk: expected [8, 8], found none");

  CHECK(message(Csa2Source::create(c, 2, true, 0)) == "csa2: ctx_tokens must be positive, found 0");
  CHECK(message(Csa2Source::create(c, 0, true, 8)) == "csa2: a source needs a compress ratio above 0, found 0");
  CHECK(Csa2Source::bytes(c, 2, true, 9) == (4 * (8 + 8) + 2 * 2 * 8) * sizeof(float));
  CHECK(Csa2Window::bytes(c) == 4 * 8 * sizeof(float));
}

TEST_CASE("csa2: calls are refused before anything is written", "[csa2]") {
  Env env;
  Store st;
  const Csa2Shape c = small_shape();
  const Csa2Role src_role{.ratio = 2, .kv_source = true, .index_source = true};
  const Csa2Role consumer{.ratio = 2};
  const Csa2Weights ws = make_weights(st, c, src_role), wc = make_weights(st, c, consumer);
  auto src_block = Csa2Block::bind(c, src_role, ws);
  auto cons_block = Csa2Block::bind(c, consumer, wc);
  REQUIRE(src_block);
  REQUIRE(cons_block);
  auto w1 = Csa2Window::create(c), w2 = Csa2Window::create(c);
  auto source = Csa2Source::create(c, 2, true, 16);
  auto ratio1 = Csa2Source::create(c, 1, true, 16);
  auto nokeys = Csa2Source::create(c, 2, false, 16);
  REQUIRE((w1 && w2 && source && ratio1 && nokeys));
  forward::Csa2Scratch s;
  s.resize(c, 16, 4);
  Csa2Selection sel;
  sel.resize(c, 4);
  const std::vector<float> x = inputs(st, 4, c.hidden);
  std::vector<float> out(4 * 16);

  CHECK(message(src_block->forward(env.exec, x.data(), 2, 1, *w1, &*source, sel, s, out.data())) ==
        "csa2: the call starts at position 1 but the window holds 0 tokens");
  CHECK(message(src_block->forward(env.exec, x.data(), 5, 0, *w1, &*source, sel, s, out.data())) ==
        "csa2: 5 tokens exceed the scratch's 4");
  CHECK(message(src_block->forward(env.exec, x.data(), 2, 0, *w1, nullptr, sel, s, out.data())) ==
        "csa2: the layer has compress ratio 2 but no source");
  CHECK(message(src_block->forward(env.exec, x.data(), 2, 0, *w1, &*ratio1, sel, s, out.data())) ==
        "csa2: the layer's compress ratio 2 differs from its source's 1");
  CHECK(message(src_block->forward(env.exec, x.data(), 2, 0, *w1, &*nokeys, sel, s, out.data())) ==
        "csa2: the source has no index keys");
  // A consumer runs after its source in the same call: before, the source is behind, and
  // without the source's selection it has nothing to attend.
  CHECK(message(cons_block->forward(env.exec, x.data(), 2, 0, *w2, &*source, sel, s, out.data())) ==
        "csa2: the source holds 0 tokens, expected 2");
  CHECK(w1->tokens() == 0);
  CHECK(source->tokens() == 0);
  REQUIRE(message(src_block->forward(env.exec, x.data(), 2, 0, *w1, &*source, sel, s, out.data())) == "ok");
  CHECK(source->tokens() == 2);
  CHECK(sel.n == 2);
  sel.reset();
  CHECK(message(cons_block->forward(env.exec, x.data(), 2, 0, *w2, &*source, sel, s, out.data())) ==
        "csa2: no index source has selected for tokens 0..1");
  CHECK(message(src_block->forward(env.exec, x.data(), 2, 0, *w2, &*source, sel, s, out.data())) ==
        "csa2: the source holds 2 tokens, expected 0");

  const Csa2Role reindex{.ratio = 2, .index_source = true, .uses_candidates = true};
  const Csa2Weights wr = make_weights(st, c, reindex);
  auto re_block = Csa2Block::bind(c, reindex, wr);
  REQUIRE(re_block);
  sel.reset();
  REQUIRE(src_block->forward(env.exec, x.data() + 2 * 16, 2, 2, *w1, &*source, sel, s, out.data()));
  auto w3 = Csa2Window::create(c);
  w3->set_tokens(2);
  CHECK(message(re_block->forward(env.exec, x.data(), 2, 2, *w3, &*source, sel, s, out.data())) ==
        "csa2: no candidate blocks for tokens 2..3");
}

TEST_CASE("csa2: the sink takes its share of the softmax denominator only", "[csa2]") {
  Env env;
  Store st;
  const Csa2Shape c = small_shape();
  Csa2Weights w = make_weights(st, c, Csa2Role{});
  std::fill(st.data(w.wq_b).begin(), st.data(w.wq_b).end(), 0.0f);  // q = 0: every score 0
  const std::vector<float> x = inputs(st, 3, c.hidden);
  // Without a sink (-inf) token 2 averages its three window entries; with sink = ln 3 each head
  // puts 3 / (3 + 3) of the weight on them: the output halves (it is linear in the heads' outputs).
  w.attn_sink.assign(std::size_t(c.heads), -INFINITY);
  const std::vector<float> plain = run_window_layer(env, c, w, x, 3);
  w.attn_sink.assign(std::size_t(c.heads), std::log(3.0f));
  const std::vector<float> sunk = run_window_layer(env, c, w, x, 3);
  for (int i = 2 * c.hidden; i < 3 * c.hidden; ++i) {
    CHECK(sunk[std::size_t(i)] == Approx(0.5f * plain[std::size_t(i)]).epsilon(1e-5).margin(1e-7));
  }
  // sink = 0 at the first token (one entry, score 0): exactly half, bit for bit.
  w.attn_sink.assign(std::size_t(c.heads), 0.0f);
  const std::vector<float> half = run_window_layer(env, c, w, x, 1);
  for (int i = 0; i < c.hidden; ++i) CHECK(half[std::size_t(i)] == 0.5f * plain[std::size_t(i)]);
}

TEST_CASE("csa2: the window ring keeps exactly the last `window` tokens", "[csa2]") {
  Env env;
  Store st;
  Csa2Shape c = small_shape();
  const Csa2Weights w = make_weights(st, c, Csa2Role{});
  const int T = 11;
  const std::vector<float> x = inputs(st, T, c.hidden);
  const std::vector<float> ring = run_window_layer(env, c, w, x, T);
  Csa2Shape wide = c;
  wide.window = 32;
  const std::vector<float> all = run_window_layer(env, wide, w, x, T);
  // Tokens 0..3 see everything either way; from token 4 on the ring has dropped the oldest.
  for (int i = 0; i < 4 * c.hidden; ++i) CHECK(ring[std::size_t(i)] == all[std::size_t(i)]);
  bool differs = false;
  for (int i = 4 * c.hidden; i < T * c.hidden; ++i) differs |= ring[std::size_t(i)] != all[std::size_t(i)];
  CHECK(differs);
  // Rotary scores and the de-rotated output depend on position differences only: the last token
  // after the ring wrapped twice equals the 4th token of a fresh sequence of the same 4 inputs.
  const std::vector<float> tail(x.begin() + (T - 4) * c.hidden, x.end());
  const std::vector<float> fresh = run_window_layer(env, c, w, tail, 4);
  for (int i = 0; i < c.hidden; ++i) {
    CHECK(ring[std::size_t((T - 1) * c.hidden + i)] == Approx(fresh[std::size_t(3 * c.hidden + i)]).margin(1e-5));
  }
  // Calls of any size give the same bits.
  CHECK(run_window_layer(env, c, w, x, T, 3) == ring);
  CHECK(run_window_layer(env, c, w, x, T, T) == ring);
}

TEST_CASE("csa2: a ratio-2 group pools its tokens per channel and is rotated at its first position", "[csa2]") {
  Env env;
  Store st;
  const Csa2Shape c = small_shape();
  const Csa2Role role{.ratio = 2, .kv_source = true, .index_source = true};
  Csa2Weights w = make_weights(st, c, role);
  // compressor.wkv picks the first head_dim inputs; the gate favours the second token of a group
  // by ln 3 on every channel: weights 1/4, 3/4.
  auto& cw = st.data(w.c_wkv);
  std::fill(cw.begin(), cw.end(), 0.0f);
  for (int i = 0; i < c.head_dim; ++i) cw[std::size_t(i * c.hidden + i)] = 1.0f;
  auto& gw = st.data(w.c_wgate);
  std::fill(gw.begin(), gw.end(), 0.0f);
  for (int i = 0; i < c.head_dim; ++i) gw[std::size_t(i * c.hidden + c.hidden - 1)] = 1.0f;
  std::vector<float> x = inputs(st, 5, c.hidden);
  for (int t = 0; t < 5; ++t) x[std::size_t(t * c.hidden + c.hidden - 1)] = (t % 2) * std::log(3.0f);
  w.c_norm.assign(std::size_t(c.head_dim), 1.0f);

  auto block = Csa2Block::bind(c, role, w);
  REQUIRE(block);
  auto run = [&](int chunk) {
    auto window = Csa2Window::create(c);
    auto source = Csa2Source::create(c, 2, true, 8);
    REQUIRE((window && source));
    forward::Csa2Scratch s;
    s.resize(c, 8, chunk);
    Csa2Selection sel;
    sel.resize(c, chunk);
    std::vector<float> out(5 * 16);
    for (int p = 0; p < 5; p += chunk) {
      const int n = std::min(chunk, 5 - p);
      sel.reset();
      REQUIRE(block->forward(env.exec, x.data() + p * c.hidden, n, p, *window, &*source, sel, s,
                             out.data() + p * c.hidden));
      if (p == 2 && chunk == 1) {
        CHECK(source->groups() == 1);  // token 2 opens group 1; it stays partial
      }
    }
    return *source;
  };
  const Csa2Source src = run(1);
  CHECK(src.tokens() == 5);
  CHECK(src.groups() == 2);
  for (int j = 0; j < 2; ++j) {
    std::vector<float> want(std::size_t(c.head_dim));
    float ss = 0.0f;
    for (int i = 0; i < c.head_dim; ++i) {
      const float a = x[std::size_t(2 * j * c.hidden + i)], b = x[std::size_t((2 * j + 1) * c.hidden + i)];
      want[std::size_t(i)] = 0.25f * a + 0.75f * b;
      ss += want[std::size_t(i)] * want[std::size_t(i)];
    }
    for (float& v : want) v /= std::sqrt(ss / float(c.head_dim));
    // Rotated at position 2j with the compress schedule.
    std::vector<double> inv(2);
    forward::rope_inv_freq(c.compress_rope, c.rope_dim, inv.data());
    for (int i = 0; i < 2; ++i) {
      const double a = want[std::size_t(4 + 2 * i)], b = want[std::size_t(5 + 2 * i)];
      const double phi = 2.0 * j * inv[std::size_t(i)];
      want[std::size_t(4 + 2 * i)] = float(a * std::cos(phi) - b * std::sin(phi));
      want[std::size_t(5 + 2 * i)] = float(a * std::sin(phi) + b * std::cos(phi));
    }
    for (int i = 0; i < c.head_dim; ++i) CHECK(src.kv(j)[i] == Approx(want[std::size_t(i)]).margin(1e-5));
  }
  // The partial group (token 4) is carried across calls: any chunking holds the same bits.
  for (int chunk : {2, 3, 5}) {
    const Csa2Source other = run(chunk);
    CHECK(std::vector<float>(other.buffer().begin(), other.buffer().end()) ==
          std::vector<float>(src.buffer().begin(), src.buffer().end()));
  }
}

TEST_CASE("csa2: equal scores keep the lower groups and blocks, the newest block pinned", "[csa2]") {
  Env env;
  Store st;
  const Csa2Shape c = small_shape();  // index_topk 2, 2 candidate blocks of 2 groups
  const Csa2Role role{.ratio = 1, .kv_source = true, .index_source = true, .candidate_source = true};
  const Csa2Role reindex{.ratio = 1, .index_source = true, .uses_candidates = true};
  Csa2Weights w = make_weights(st, c, role);
  Csa2Weights wr = make_weights(st, c, reindex);
  // weights_proj = 0: every group scores 0.
  std::fill(st.data(w.i_weights_proj).begin(), st.data(w.i_weights_proj).end(), 0.0f);
  std::fill(st.data(wr.i_weights_proj).begin(), st.data(wr.i_weights_proj).end(), 0.0f);
  auto block = Csa2Block::bind(c, role, w);
  auto re_block = Csa2Block::bind(c, reindex, wr);
  REQUIRE((block && re_block));
  const int T = 9;
  const std::vector<float> x = inputs(st, T, c.hidden);
  auto w1 = Csa2Window::create(c), w2 = Csa2Window::create(c);
  auto source = Csa2Source::create(c, 1, true, T);
  REQUIRE((w1 && w2 && source));
  forward::Csa2Scratch s;
  s.resize(c, T, T);
  Csa2Selection sel;
  sel.resize(c, T);
  std::vector<float> out(std::size_t(T) * 16);
  REQUIRE(block->forward(env.exec, x.data(), T, 0, *w1, &*source, sel, s, out.data()));
  for (int p = 0; p < T; ++p) {
    // Token p sees groups 0..p: the lowest two, and blocks: the lowest, then the newest (p / 2).
    const std::vector<int> groups(sel.groups.begin() + p * 2, sel.groups.begin() + p * 2 + sel.count[std::size_t(p)]);
    CHECK(groups == (p == 0 ? std::vector<int>{0} : std::vector<int>{0, 1}));
    const std::vector<int> blocks(sel.blocks.begin() + p * 2,
                                  sel.blocks.begin() + p * 2 + sel.block_count[std::size_t(p)]);
    CHECK(blocks == (p < 2 ? std::vector<int>{0} : std::vector<int>{0, p / 2}));
  }
  // The reindex source ranks only inside those blocks: at equal scores the lowest groups again;
  // a copy of the selection with only the newest block kept shows the filter acting.
  REQUIRE(re_block->forward(env.exec, x.data(), T, 0, *w2, &*source, sel, s, out.data()));
  CHECK(std::vector<int>(sel.groups.begin() + 8 * 2, sel.groups.begin() + 8 * 2 + 2) == std::vector<int>{0, 1});
  // The same with only the newest block kept per token: the filter acts.
  auto w3 = Csa2Window::create(c), w4 = Csa2Window::create(c);
  auto source2 = Csa2Source::create(c, 1, true, T);
  REQUIRE((w3 && w4 && source2));
  sel.reset();
  REQUIRE(block->forward(env.exec, x.data(), T, 0, *w3, &*source2, sel, s, out.data()));
  for (int p = 0; p < T; ++p) sel.blocks[std::size_t(p * 2)] = p / 2, sel.block_count[std::size_t(p)] = 1;
  REQUIRE(re_block->forward(env.exec, x.data(), T, 0, *w4, &*source2, sel, s, out.data()));
  CHECK(std::vector<int>(sel.groups.begin() + 8 * 2, sel.groups.begin() + 8 * 2 + sel.count[8]) == std::vector<int>{8});
  CHECK(std::vector<int>(sel.groups.begin() + 7 * 2, sel.groups.begin() + 7 * 2 + sel.count[7]) ==
        std::vector<int>{6, 7});
}

namespace {

// A ratio-2 KV + index + candidate source, a consumer and a reindex source over T tokens in calls
// of `chunk`, on a pool of `threads`; with `restore_at` > 0 the states are copied into fresh
// objects (buffer() and tokens(), what a session saves) before that position (at an odd position
// the source holds a partial group). The outputs.
std::vector<float> run_stack(int threads, int chunk, int restore_at) {
  ThreadPool pool(threads);
  const forward::Exec exec{pool, kernels::active()};
  Store st;
  const Csa2Shape c = small_shape();
  const Csa2Role roles[3] = {{.ratio = 2, .kv_source = true, .index_source = true, .candidate_source = true},
                             {.ratio = 2},
                             {.ratio = 2, .index_source = true, .uses_candidates = true}};
  std::vector<Csa2Weights> w;
  std::vector<Csa2Block> blocks;
  std::vector<Csa2Window> windows;
  for (const Csa2Role& role : roles) w.push_back(make_weights(st, c, role));
  for (int L = 0; L < 3; ++L) {
    auto b = Csa2Block::bind(c, roles[L], w[std::size_t(L)]);
    auto win = Csa2Window::create(c);
    REQUIRE((b && win));
    blocks.push_back(*b);
    windows.push_back(std::move(*win));
  }
  const int T = 23;
  auto source = Csa2Source::create(c, 2, true, T);
  REQUIRE(source);
  const std::vector<float> x = inputs(st, T, c.hidden);
  forward::Csa2Scratch s;
  s.resize(c, T, chunk);
  Csa2Selection sel;
  sel.resize(c, chunk);
  std::vector<float> out(std::size_t(3 * T * c.hidden));
  for (int p = 0; p < T;) {
    int n = std::min(chunk, T - p);
    if (restore_at > p && restore_at < p + n) n = restore_at - p;
    if (p == restore_at) {
      auto fresh = Csa2Source::create(c, 2, true, T);
      REQUIRE(fresh);
      std::copy(source->buffer().begin(), source->buffer().end(), fresh->buffer().begin());
      fresh->set_tokens(source->tokens());
      source = std::move(fresh);
      for (auto& win : windows) {
        auto again = Csa2Window::create(c);
        REQUIRE(again);
        std::copy(win.buffer().begin(), win.buffer().end(), again->buffer().begin());
        again->set_tokens(win.tokens());
        win = std::move(*again);
      }
    }
    sel.reset();
    for (int L = 0; L < 3; ++L) {
      REQUIRE(blocks[std::size_t(L)].forward(exec, x.data() + p * c.hidden, n, p, windows[std::size_t(L)], &*source,
                                             sel, s, out.data() + (L * T + p) * c.hidden));
    }
    p += n;
  }
  return out;
}

}  // namespace

TEST_CASE("csa2: the bits do not depend on threads, chunking or a save and restore of the state", "[csa2]") {
  const std::vector<float> base = run_stack(1, 1, 0);
  CHECK(run_stack(3, 1, 0) == base);
  CHECK(run_stack(2, 5, 0) == base);
  CHECK(run_stack(3, 23, 0) == base);
  CHECK(run_stack(2, 4, 11) == base);  // restored in the middle of a run, then calls of 4
}

TEST_CASE("csa2: a batch of two sequences gives each token the bits it gets alone", "[csa2]") {
  Env env;
  Store st;
  const Csa2Shape c = small_shape();
  const Csa2Role roles[3] = {{.ratio = 2, .kv_source = true, .index_source = true, .candidate_source = true},
                             {.ratio = 2},
                             {.ratio = 2, .index_source = true, .uses_candidates = true}};
  std::vector<Csa2Weights> w;
  std::vector<Csa2Block> blocks;
  for (const Csa2Role& role : roles) w.push_back(make_weights(st, c, role));
  for (int L = 0; L < 3; ++L) {
    auto b = Csa2Block::bind(c, roles[L], w[std::size_t(L)]);
    REQUIRE(b);
    blocks.push_back(*b);
  }
  const int lengths[2] = {11, 8};
  const std::vector<float> xs[2] = {inputs(st, lengths[0], c.hidden), inputs(st, lengths[1], c.hidden)};
  struct Seq {
    std::vector<Csa2Window> windows;
    std::optional<Csa2Source> source;
  };
  auto fresh = [&](int len) {
    Seq q;
    for (int L = 0; L < 3; ++L) q.windows.push_back(*Csa2Window::create(c));
    q.source = *Csa2Source::create(c, 2, true, len);
    return q;
  };
  forward::Csa2Scratch s;
  s.resize(c, 16, 4);
  Csa2Selection sel;
  sel.resize(c, 4);

  // Alone, token by token.
  std::vector<float> alone[2];
  for (int q = 0; q < 2; ++q) {
    Seq seq = fresh(lengths[q]);
    alone[q].resize(std::size_t(3 * lengths[q] * c.hidden));
    for (int p = 0; p < lengths[q]; ++p) {
      sel.reset();
      for (int L = 0; L < 3; ++L) {
        REQUIRE(blocks[std::size_t(L)].forward(env.exec, xs[q].data() + p * c.hidden, 1, p,
                                               seq.windows[std::size_t(L)], &*seq.source, sel, s,
                                               alone[q].data() + (L * lengths[q] + p) * c.hidden));
      }
    }
  }
  // Batched: sequence 0's first three tokens with sequence 1's first, then one token of each.
  Seq seqs[2] = {fresh(lengths[0]), fresh(lengths[1])};
  int next[2] = {0, 0};
  std::vector<std::pair<int, int>> plan = {{0, 3}, {1, 1}};
  for (int k = 0; k < 8; ++k) plan.push_back({0, 1}), plan.push_back({1, 1});
  std::vector<float> x(std::size_t(4 * c.hidden)), out(std::size_t(3 * 4 * c.hidden));
  std::size_t at = 0;
  while (at < plan.size()) {
    std::vector<int> seq_of, positions;
    while (at < plan.size() && positions.size() + std::size_t(plan[at].second) <= 4) {
      const auto [q, count] = plan[at++];
      for (int i = 0; i < count && next[q] < lengths[q]; ++i) seq_of.push_back(q), positions.push_back(next[q]++);
    }
    const int n = int(positions.size());
    if (n == 0) continue;
    for (int t = 0; t < n; ++t) {
      const float* src = xs[seq_of[std::size_t(t)]].data() + positions[std::size_t(t)] * c.hidden;
      std::copy(src, src + c.hidden, x.begin() + t * c.hidden);
    }
    sel.reset();
    for (int L = 0; L < 3; ++L) {
      auto window_of = [&](int t) -> Csa2Window& { return seqs[seq_of[std::size_t(t)]].windows[std::size_t(L)]; };
      auto source_of = [&](int t) -> Csa2Source* { return &*seqs[seq_of[std::size_t(t)]].source; };
      REQUIRE(blocks[std::size_t(L)].forward(env.exec, x.data(), positions, window_of, source_of, sel, s,
                                             out.data() + L * n * c.hidden));
    }
    for (int L = 0; L < 3; ++L) {
      for (int t = 0; t < n; ++t) {
        const int q = seq_of[std::size_t(t)], p = positions[std::size_t(t)];
        const float* got = out.data() + (L * n + t) * c.hidden;
        const float* want = alone[q].data() + (L * lengths[q] + p) * c.hidden;
        CHECK(std::vector<float>(got, got + c.hidden) == std::vector<float>(want, want + c.hidden));
      }
    }
  }
  CHECK((next[0] == lengths[0] && next[1] == lengths[1]));

  // A token out of order is refused, naming it.
  const std::vector<int> wrong = {lengths[0] + 1};
  auto window_of = [&](int) -> Csa2Window& { return seqs[0].windows[0]; };
  auto source_of = [&](int) -> Csa2Source* { return &*seqs[0].source; };
  sel.reset();
  CHECK(message(blocks[0].forward(env.exec, x.data(), wrong, window_of, source_of, sel, s, out.data())) ==
        "csa2: batch token 0 is at position 12 but its window holds 11 tokens");
  CHECK(message(blocks[1].forward(env.exec, x.data(), wrong, window_of, source_of, sel, s, out.data())) ==
        "csa2: no index source has selected for this batch of 1 tokens");
}

TEST_CASE("csa2: a quantized wo_a is read group by group at its rows' payload and scales", "[csa2]") {
  Env env;
  Store st;
  Csa2Shape c = small_shape();
  c.heads = 4, c.head_dim = 80;  // wo_a: [2 * 4, 160], two scale groups of 128 per row
  Csa2Weights w = make_weights(st, c, Csa2Role{});
  const test::TrunkMatrix q8 = test::make_trunk_matrix(2, 8, 160, 31);
  const test::TrunkMatrix q4 = test::make_trunk_matrix(3, 8, 160, 32);
  const std::vector<float> x = inputs(st, 6, c.hidden);
  for (const test::TrunkMatrix* m : {&q8, &q4}) {
    w.wo_a = m->view;
    const std::vector<float> quant = run_window_layer(env, c, w, x, 6);
    w.wo_a = Store::view(m->dequant, 8, 160);  // the same values as f32
    const std::vector<float> plain = run_window_layer(env, c, w, x, 6);
    for (std::size_t i = 0; i < plain.size(); ++i) CHECK(quant[i] == Approx(plain[i]).margin(1e-5));
  }
}

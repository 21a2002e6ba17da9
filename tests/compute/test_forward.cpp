// Forward pass: absorbed MLA against the textbook expanded attention, routing against hand
// arithmetic, thread-count and cache independence of the logits, the local expert source.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "compute/api/engine.hpp"
#include "compute/forward/attn_res.hpp"
#include "compute/forward/forward.hpp"
#include "compute/forward/mla.hpp"
#include "compute/forward/moe.hpp"
#include "int8_prefill_guard.hpp"
#include "local_expert_source.hpp"
#include "compute/kernels/kernels.hpp"
#include "compute/model/run_state.hpp"
#include "compute/model/weights.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "shared/container/container.hpp"
#include "shared/container/trunk.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

std::vector<double> dequantized(const Trunk& trunk, const std::string& name) {
  const TrunkTensor* t = trunk.find(name);
  INFO(name);
  REQUIRE(t != nullptr);
  auto values = trunk.dequantize(*t);
  REQUIRE(values);
  return std::vector<double>(values->begin(), values->end());
}

// y = W x with W rows x cols row-major (double accumulation).
std::vector<double> mul(const std::vector<double>& w, const std::vector<double>& x, std::size_t rows) {
  const std::size_t cols = x.size();
  REQUIRE(w.size() == rows * cols);
  std::vector<double> y(rows, 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) y[r] += w[r * cols + c] * x[c];
  }
  return y;
}

std::vector<double> rms(const std::vector<double>& x, const std::vector<double>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * w[i];
  return out;
}

// Deterministic inputs in [-1, 1) independent of the standard library's distributions.
struct Lcg {
  std::uint64_t s;
  float next() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return float((s >> 40) & 0xffffff) / float(1 << 23) - 1.0f;
  }
};

// The un-absorbed MLA of one model layer: k_t = [W_kb c_t, k_r,t], v_t = W_vb c_t, softmax
// attention per head, everything in double from dequantised weights.
class ExpandedMla {
 public:
  ExpandedMla(const Trunk& trunk, const ModelConfig& c, int layer) : c_(c) {
    const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
    const auto qd = std::size_t(c.qk_nope + c.qk_rope);
    if (c.q_lora > 0) {
      q_a_ = dequantized(trunk, p + "q_a_proj.weight");
      q_a_norm_ = dequantized(trunk, p + "q_a_layernorm.weight");
      q_b_ = dequantized(trunk, p + "q_b_proj.weight");
    } else {
      q_ = dequantized(trunk, p + "q_proj.weight");
    }
    kv_a_ = dequantized(trunk, p + "kv_a_proj_with_mqa.weight");
    kv_norm_ = dequantized(trunk, p + "kv_a_layernorm.weight");
    kv_b_ = dequantized(trunk, p + "kv_b_proj.weight");
    o_ = dequantized(trunk, p + "o_proj.weight");
    if (c.mla_output_gate) g_ = dequantized(trunk, p + "g_proj.weight");
    (void)qd;
  }

  std::vector<double> step(const std::vector<double>& x) {
    const int nh = c_.n_heads, nope = c_.qk_nope, rope = c_.qk_rope, qd = nope + rope, lora = c_.kv_lora,
              vd = c_.v_head;
    std::vector<double> q = c_.q_lora > 0
                                ? mul(q_b_, rms(mul(q_a_, x, std::size_t(c_.q_lora)), q_a_norm_, c_.rms_eps),
                                      std::size_t(nh * qd))
                                : mul(q_, x, std::size_t(nh * qd));
    std::vector<double> ckv = mul(kv_a_, x, std::size_t(lora + rope));
    cache_c_.push_back(rms(std::vector<double>(ckv.begin(), ckv.begin() + lora), kv_norm_, c_.rms_eps));
    cache_r_.emplace_back(ckv.begin() + lora, ckv.end());

    std::vector<double> o(std::size_t(nh * vd), 0.0);
    const std::size_t n = cache_c_.size();
    for (int h = 0; h < nh; ++h) {
      std::vector<double> scores(n), values(n * std::size_t(vd));
      for (std::size_t t = 0; t < n; ++t) {
        double s = 0;
        for (int i = 0; i < nope; ++i) {
          double k = 0;
          const std::size_t row = std::size_t(h * (nope + vd) + i);
          for (int j = 0; j < lora; ++j) k += kv_b_[row * lora + j] * cache_c_[t][j];
          s += q[std::size_t(h * qd + i)] * k;
        }
        for (int i = 0; i < rope; ++i) s += q[std::size_t(h * qd + nope + i)] * cache_r_[t][i];
        scores[t] = s / std::sqrt(double(qd));
        for (int i = 0; i < vd; ++i) {
          double v = 0;
          const std::size_t row = std::size_t(h * (nope + vd) + nope + i);
          for (int j = 0; j < lora; ++j) v += kv_b_[row * lora + j] * cache_c_[t][j];
          values[t * vd + i] = v;
        }
      }
      double mx = scores[0], sum = 0;
      for (double s : scores) mx = std::max(mx, s);
      for (double& s : scores) sum += (s = std::exp(s - mx));
      for (std::size_t t = 0; t < n; ++t) {
        for (int i = 0; i < vd; ++i) o[std::size_t(h * vd + i)] += scores[t] / sum * values[t * vd + i];
      }
    }
    if (c_.mla_output_gate) {
      std::vector<double> g = mul(g_, x, o.size());
      for (std::size_t i = 0; i < o.size(); ++i) o[i] *= 1.0 / (1.0 + std::exp(-g[i]));
    }
    return mul(o_, o, std::size_t(c_.hidden));
  }

 private:
  const ModelConfig& c_;
  std::vector<double> q_, q_a_, q_a_norm_, q_b_, kv_a_, kv_norm_, kv_b_, o_, g_;
  std::vector<std::vector<double>> cache_c_, cache_r_;
};

void check_absorbed_mla(const std::string& preset) {
  // Two attention forms compared at 1e-4: f32 trunk products (an int8 rounding flips on a 1e-6 change).
  test::Int8PrefillGuard int8(false);
  const auto dir = test::synth_container(preset);
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  const ModelConfig& c = info->manifest.config;
  auto trunk = Trunk::load(dir, info->manifest);
  REQUIRE(trunk);
  auto weights = model::ModelWeights::bind(c, *trunk);
  REQUIRE(weights);
  int layer = -1;
  for (int L = 0; L < c.n_layers && layer < 0; ++L) {
    if (!c.is_kda(L)) layer = L;
  }
  REQUIRE(layer >= 0);

  const int ctx = 8;
  auto state = model::RunState::create(c, ctx);
  REQUIRE(state);
  ThreadPool pool(2);
  forward::Exec exec{pool, kernels::generic()};
  const int n_pos = 6;
  forward::MlaScratch scratch;
  scratch.resize(c, ctx, n_pos);
  ExpandedMla expanded(*trunk, c, layer);
  const model::MlaWeights& w = weights->layers[std::size_t(layer)].mla_w;

  Lcg rng{7};
  const std::size_t hid = std::size_t(c.hidden);
  std::vector<float> xs(n_pos * hid), outs(n_pos * hid), batched(n_pos * hid);
  for (float& v : xs) v = rng.next();
  // Token by token (the decode step), each output against the expanded reference.
  for (int pos = 0; pos < n_pos; ++pos) {
    forward::mla_forward(exec, c, w, xs.data() + pos * hid, 1, pos, state->latent_cache(layer).data(), scratch,
                         outs.data() + pos * hid);
    const std::vector<double> ref =
        expanded.step(std::vector<double>(xs.begin() + pos * hid, xs.begin() + (pos + 1) * hid));
    double max_ref = 0, max_diff = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      max_ref = std::max(max_ref, std::abs(ref[i]));
      max_diff = std::max(max_diff, std::abs(double(outs[pos * hid + i]) - ref[i]));
    }
    INFO(preset << " layer " << layer << " position " << pos << ": max |diff| " << max_diff << ", max |ref| "
                << max_ref);
    REQUIRE(max_ref > 0);
    CHECK(max_diff <= 1e-5 * max_ref);
  }
  // The same positions as one chunk (prefill): causal per token, and per element the same
  // arithmetic as the decode step, so the same bits and the same cache.
  const std::vector<float> cache_seq(state->latent_cache(layer).begin(), state->latent_cache(layer).end());
  state->reset();
  forward::mla_forward(exec, c, w, xs.data(), n_pos, 0, state->latent_cache(layer).data(), scratch, batched.data());
  CHECK(std::memcmp(batched.data(), outs.data(), batched.size() * sizeof(float)) == 0);
  CHECK(std::equal(cache_seq.begin(), cache_seq.end(), state->latent_cache(layer).begin()));
}

// Logits after each of 16 prompt tokens and 16 greedy tokens.
std::vector<std::vector<float>> run_logits(const std::filesystem::path& dir, int threads, std::size_t cache_records,
                                           ExpertSourceStats* stats = nullptr) {
  EngineOptions options;
  options.model = dir;
  options.threads = threads;
  options.ctx_tokens = 64;
  options.cache_records = cache_records;
  auto engine = Engine::open(options);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  const int vocab = (*engine)->config().vocab;
  std::vector<std::vector<float>> all;
  int token = 1;
  for (int step = 0; step < 32; ++step) {
    if (step < 16) {
      token = (step * 37 + 5) % vocab;
    } else {
      const auto& last = all.back();
      token = int(std::max_element(last.begin(), last.end()) - last.begin());
    }
    const int one[1] = {token};
    auto logits = (*engine)->eval(one);
    REQUIRE(logits);
    all.emplace_back(logits->begin(), logits->end());
  }
  if (stats) *stats = (*engine)->stats();
  return all;
}

bool bit_identical(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("Absorbed MLA equals expanded attention on the tiny container", "[compute][forward]") {
  check_absorbed_mla("tiny");
}

TEST_CASE("Absorbed MLA with q_lora and output gate equals expanded attention on tiny-k3", "[compute][forward]") {
  check_absorbed_mla("tiny-k3");
}

// With 2 threads decode runs its experts two at a time, each whole on one thread
// (run_experts_whole); with 1, each split into row chunks (run_expert): the same bits. kl-shaped
// VQ4P covers the int8 down LUT quantised in one range instead of per chunk.
TEST_CASE("Logits are bit-identical with 1 and 2 threads", "[compute][forward]") {
  for (const char* preset : {"tiny", "tiny-k3", "kl-shaped vq4p"}) {
    INFO(preset);
    const auto dir = std::string_view(preset) == "kl-shaped vq4p" ? test::kl_shaped("vq4p") : test::synth_container(preset);
    const auto one = run_logits(dir, 1, 0);
    const auto two = run_logits(dir, 2, 0);
    REQUIRE(one.size() == 32);
    // A forward pass that produced nothing useful would trivially agree: demand finite, varied logits.
    const auto& l = one.back();
    CHECK(std::all_of(l.begin(), l.end(), [](float v) { return std::isfinite(v); }));
    CHECK(*std::max_element(l.begin(), l.end()) > *std::min_element(l.begin(), l.end()));
    CHECK(bit_identical(one, two));
  }
}

TEST_CASE("Logits are bit-identical with the smallest and a whole-model expert cache", "[compute][forward]") {
  const auto dir = test::synth_container("tiny");
  ExpertSourceStats cold{}, warm{};
  // cache_records 0: the in-process arena's minimum (2 * top_k slots); 100000: every record.
  const auto smallest = run_logits(dir, 2, 0, &cold);
  const auto cached = run_logits(dir, 2, 100000, &warm);
  CHECK(warm.hits > cold.hits);
  CHECK(warm.misses < cold.misses);
  CHECK(warm.hits + warm.misses == cold.hits + cold.misses);  // the same demands
  CHECK(bit_identical(smallest, cached));
}

TEST_CASE("Routing keeps selection order, breaks ties to the lower id, biases selection only",
          "[compute][forward]") {
  ModelConfig c;
  c.n_experts = 6;
  c.top_k = 3;
  c.renormalize = true;
  c.routed_scale = 2.5f;
  model::MoeWeights w;
  w.score_bias = {0.0f, 0.0f, 0.0f, 0.0f, 0.6f, -1.5f};
  forward::MoeScratch s;
  s.probs.resize(6);
  s.scored.resize(6);
  s.taken.resize(6);
  s.ids.resize(3);
  s.weights.resize(3);
  const float logits[6] = {0.0f, 1.0f, 1.0f, -1.0f, 0.5f, 2.0f};
  forward::route(c, w, logits, s);
  // Biased scores: 0.5, 0.731, 0.731, 0.269, 1.222, -0.619 -> 4, then the 1/2 tie in id order.
  CHECK(s.ids == std::vector<int>{4, 1, 2});
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  const double p4 = sig(0.5), p1 = sig(1.0), sum = p4 + 2 * p1;
  CHECK(s.weights[0] == Approx(p4 / sum * 2.5).epsilon(1e-6));
  CHECK(s.weights[1] == Approx(p1 / sum * 2.5).epsilon(1e-6));
  CHECK(s.weights[2] == Approx(p1 / sum * 2.5).epsilon(1e-6));

  // top_k 1: no renormalisation even when asked, only the routed scale.
  c.top_k = 1;
  forward::route(c, w, logits, s);
  CHECK(s.ids[0] == 4);
  CHECK(s.weights[0] == Approx(p4 * 2.5).epsilon(1e-6));
}

TEST_CASE("Attention Residuals mix the block history and the live sum by a normed softmax",
          "[compute][forward]") {
  const int n = 4;
  const float blocks[2 * n] = {1.0f, -2.0f, 0.5f, 3.0f, -1.0f, 0.25f, 2.0f, 0.0f};
  float ps[n] = {0.5f, 0.5f, -1.5f, 1.0f};
  const float norm_w[n] = {1.0f, 0.5f, -0.25f, 2.0f};
  const float proj_w[n] = {0.3f, -1.0f, 0.7f, 0.2f};
  const float eps = 1e-5f;
  // Reference in double: score_i = sum_j v_ij / rms(v_i) * norm_j * proj_j, softmax, weighted sum.
  const float* cand[3] = {blocks, blocks + n, ps};
  double score[3], mx = -1e300, sum = 0;
  for (int i = 0; i < 3; ++i) {
    double ss = 0;
    for (int j = 0; j < n; ++j) ss += double(cand[i][j]) * cand[i][j];
    const double inv = 1.0 / std::sqrt(ss / n + eps);
    score[i] = 0;
    for (int j = 0; j < n; ++j) score[i] += cand[i][j] * inv * norm_w[j] * proj_w[j];
    mx = std::max(mx, score[i]);
  }
  for (double& sc : score) sum += (sc = std::exp(sc - mx));
  double expected[n] = {};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < n; ++j) expected[j] += score[i] / sum * cand[i][j];
  }
  float scores[3];
  forward::attn_res(blocks, 2, ps, norm_w, proj_w, n, eps, scores, ps);  // out aliases ps
  for (int j = 0; j < n; ++j) CHECK(ps[j] == Approx(expected[j]).epsilon(1e-6).margin(1e-6));
}

TEST_CASE("Local expert source counts hits and misses and evicts the least recently used record",
          "[compute][forward]") {
  const auto dir = test::synth_container("tiny");
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  const int layer = info->manifest.banks.begin()->first;
  const std::uint64_t rec = info->geometry.record_bytes;
  auto source = LocalExpertSource::open(*info, LocalSourceOptions{false, true, 2});
  REQUIRE(source);
  auto& src = **source;

  const int first[2] = {0, 1};
  REQUIRE(src.request(layer, first));
  auto v0 = src.acquire(layer, 0);
  auto v1 = src.acquire(layer, 1);
  REQUIRE(v0);
  REQUIRE(v1);
  CHECK(v0->expert == 0);
  CHECK(v1->expert == 1);
  CHECK(v1->layer == layer);
  src.release_layer(layer);
  CHECK(src.stats().misses == 2);
  CHECK(src.stats().bytes_read == 2 * rec);

  const int second[2] = {1, 2};  // 1 is cached; 2 evicts 0, the least recently used
  REQUIRE(src.request(layer, second));
  src.release_layer(layer);
  CHECK(src.stats().hits == 1);
  CHECK(src.stats().misses == 3);

  const int third[1] = {0};
  REQUIRE(src.request(layer, third));
  src.release_layer(layer);
  CHECK(src.stats().hits == 1);
  CHECK(src.stats().misses == 4);

  // More records at once than cache slots: the overflow goes to a private buffer.
  const int three[3] = {3, 4, 5};
  REQUIRE(src.request(layer, three));
  for (int e : three) {
    auto v = src.acquire(layer, e);
    REQUIRE(v);
    CHECK(v->expert == e);
  }
  src.release_layer(layer);

  auto unrequested = src.acquire(layer, 5);
  REQUIRE_FALSE(unrequested);
  CHECK(unrequested.error().message ==
        "expert 5 of layer " + std::to_string(layer) + ": acquired without a request");
  const int bad[1] = {info->manifest.config.n_experts};
  auto refused = src.request(layer, bad);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message == "expert " + std::to_string(bad[0]) + " of layer " + std::to_string(layer) +
                                       ": out of range 0.." + std::to_string(bad[0] - 1));
}

}  // namespace waste

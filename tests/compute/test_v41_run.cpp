// DeepSeek-V4.1-Flash through the engine's layer loop (families/deepseek_v41.cpp): the tiny-v41
// synth container (every mechanism on: window ring wrapping, compress ratios 0/2/1, three KV
// sources, three index sources of which one is the candidate source and a later one scores
// inside its blocks, index_topk below the groups, single-pass mHC, the noaux gate with
// gate_temp and route_scale) opens and runs; chunked prefill of decode-kind tokens (chunks of
// 1, 3 and all) gives the bits of token-at-a-time decode, prompt-kind chunks within 1e-5 of
// them; a batch of two sequences gives each its bits alone; a session saved mid-sequence
// continues with identical logits and a mismatched head_dim is refused; the bind checks the
// one tensor list (shared/container/v41_tensors.hpp) and names the tensor. The float64 oracle
// of the whole model is tests/reference's (another file); this file checks self-consistency.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "compute/api/engine.hpp"
#include "compute/forward/families/family.hpp"
#include "compute/model/weights.hpp"
#include "compute/session/session_file.hpp"
#include "shared/container/container.hpp"
#include "shared/container/trunk.hpp"
#include "shared/container/v41_tensors.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Engine> open_v41(int ctx = 64, int chunk = 64) {
  EngineOptions o;
  o.model = test::synth_container("tiny-v41");
  o.threads = 2;
  o.ctx_tokens = ctx;
  o.prefill_chunk = chunk;
  o.lookahead = 0;
  auto engine = Engine::open(o);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return std::move(*engine);
}

// 24 tokens: the 8-token window wraps three times, the ratio-1 sources hold 24 groups (12
// candidate blocks of 2, 3 kept), the ratio-2 source 12; index_topk 3 keeps fewer than all.
std::vector<int> tokens(int n, int salt) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back((i * 37 + salt * 11) % 250 + 3);
  return out;
}

std::vector<float> copy(std::span<const float> v) { return {v.begin(), v.end()}; }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0.0f;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// The logits after every token, fed one at a time as decode steps.
std::vector<std::vector<float>> decode_each(const std::vector<int>& t) {
  auto e = open_v41();
  std::vector<std::vector<float>> out;
  for (int tok : t) {
    auto l = e->eval(std::span<const int>(&tok, 1), {}, FeedKind::decode);
    INFO((l ? std::string() : l.error().message));
    REQUIRE(l);
    out.push_back(copy(*l));
  }
  return out;
}

}  // namespace

TEST_CASE("V4.1 plan: every layer CSA2 and MoE, roles from the config, single-pass mHC", "[compute][v41]") {
  auto info = ContainerInfo::open(test::synth_container("tiny-v41"));
  INFO((info ? std::string() : info.error().message));
  REQUIRE(info);
  const ModelConfig& c = info->manifest.config;
  const forward::ModelPlan plan = forward::plan_model(c);
  CHECK(plan.family == "deepseek-v4.1");
  CHECK(plan.residual == forward::ResidualKind::mhc_single_pass);
  REQUIRE(plan.layers.size() == 6);
  const int ratio[6] = {0, 2, 2, 1, 1, 1}, source[6] = {-1, 1, 1, 3, 3, 3};
  for (int l = 0; l < 6; ++l) {
    const forward::LayerPlan& p = plan.layers[std::size_t(l)];
    INFO("layer " << l);
    CHECK(p.attention == forward::AttentionKind::csa2);
    CHECK(p.mixer == forward::MixerKind::moe);
    CHECK_FALSE(p.engram);
    CHECK(p.csa2.ratio == ratio[l]);
    CHECK(p.kv_source == source[l]);
    CHECK(p.csa2.kv_source == (l == 1 || l == 3));
    CHECK(p.csa2.index_source == (l == 1 || l == 3 || l == 5));
    CHECK(p.csa2.candidate_source == (l == 3));
    CHECK(p.csa2.uses_candidates == (l == 5));
  }
}

TEST_CASE("V4.1 chunked prefill gives token-at-a-time decode's bits", "[compute][v41]") {
  const std::vector<int> t = tokens(24, 1);
  const auto want = decode_each(t);
  for (int chunk : {1, 3, 64}) {
    INFO("prefill chunk " << chunk);
    auto e = open_v41(64, chunk);
    auto l = e->eval(t, {}, FeedKind::decode);
    INFO((l ? std::string() : l.error().message));
    REQUIRE(l);
    CHECK(same_bits(copy(*l), want.back()));
    CHECK(e->position() == 24);
  }
  // Prompt tokens take the experts by matrix products (expert_batch.hpp): close, maybe not bits.
  auto p = open_v41();
  auto l = p->eval(t, {}, FeedKind::prompt);
  REQUIRE(l);
  const float err = max_abs_diff(copy(*l), want.back());
  INFO("prompt-kind prefill vs decode: max |diff| " << err);
  CHECK(err <= 1e-5f);
  // The logits move with the context: the last token alone gives something else.
  auto alone = open_v41();
  auto one = alone->eval(std::span<const int>(&t.back(), 1), {}, FeedKind::decode);
  REQUIRE(one);
  CHECK(max_abs_diff(copy(*one), want.back()) > 1e-3f);
}

TEST_CASE("V4.1 batch of two sequences gives each the bits it gets alone", "[compute][v41]") {
  const std::vector<int> a = tokens(19, 2), b = tokens(13, 3);
  const auto want_a = decode_each(a), want_b = decode_each(b);
  auto e = open_v41();
  auto sa = e->new_sequence();
  auto sb = e->new_sequence();
  REQUIRE(sa);
  REQUIRE(sb);
  // First pass: 10 tokens of a beside 13 of b; then a's rest beside nothing, one at a time.
  const SequenceFeed first[2] = {{sa->get(), std::span<const int>(a.data(), 10), {}, FeedKind::decode},
                                 {sb->get(), std::span<const int>(b), {}, FeedKind::decode}};
  const Status fed = e->feed_batch(first);
  INFO((fed ? std::string() : fed.error().message));
  REQUIRE(fed);
  CHECK(same_bits(copy((*sa)->logits()), want_a[9]));
  CHECK(same_bits(copy((*sb)->logits()), want_b.back()));
  // Then a's next tokens beside b's decode steps (b fed the same token each step).
  std::vector<int> b_more = b;
  for (int i = 10; i < 19; ++i) {
    const int tb = 7 + i;
    b_more.push_back(tb);
    const SequenceFeed step[2] = {{sa->get(), std::span<const int>(&a[std::size_t(i)], 1), {}, FeedKind::decode},
                                  {sb->get(), std::span<const int>(&b_more.back(), 1), {}, FeedKind::decode}};
    REQUIRE(e->feed_batch(step));
    CHECK(same_bits(copy((*sa)->logits()), want_a[std::size_t(i)]));
  }
  const auto want_b_more = decode_each(b_more);
  CHECK(same_bits(copy((*sb)->logits()), want_b_more.back()));
}

TEST_CASE("V4.1 session saved mid-sequence continues with identical logits", "[compute][v41][session]") {
  const fs::path file = fs::temp_directory_path() / ("waste-v41-session-" + std::to_string(getpid()));
  // 21 tokens: the ratio-2 source holds a partial group (21 % 2 = 1), the window has wrapped.
  const std::vector<int> head = tokens(21, 4), rest = tokens(9, 5);
  auto a = open_v41();
  REQUIRE(a->eval(head, {}, FeedKind::decode));
  REQUIRE(session::save(*a, file));
  const ModelConfig& c = a->config();
  CHECK(fs::file_size(file) == session::session_bytes(c, session::make_header(c, a->run_state())));
  REQUIRE(a->eval(rest, {}, FeedKind::decode));
  const std::vector<float> uninterrupted = copy(a->logits());

  auto b = open_v41();
  REQUIRE(b->eval(tokens(5, 9), {}, FeedKind::decode));
  const Status loaded = session::load(*b, file);
  INFO((loaded ? std::string() : loaded.error().message));
  REQUIRE(loaded);
  CHECK(b->run_state().csa_window(0).tokens() == 21);
  REQUIRE(b->run_state().csa_source(1) != nullptr);
  CHECK(b->run_state().csa_source(1)->tokens() == 21);
  REQUIRE(b->eval(rest, {}, FeedKind::decode));
  CHECK(same_bits(copy(b->logits()), uninterrupted));

  // The compressed branch matters: with layer 3's latents zeroed the continuation differs.
  auto d = open_v41();
  REQUIRE(session::load(*d, file));
  auto buf = d->run_state().csa_source(3)->buffer();
  std::fill(buf.begin(), buf.begin() + 21 * c.head_dim, 0.0f);
  REQUIRE(d->eval(rest, {}, FeedKind::decode));
  CHECK_FALSE(same_bits(copy(d->logits()), uninterrupted));

  // A session of another head_dim is refused by the header.
  std::vector<std::byte> bytes = session::encode(c, a->run_state());
  std::uint32_t other = 16;
  std::memcpy(bytes.data() + 60, &other, sizeof other);
  const Status refused = session::validate(bytes, c, a->run_state(), "x");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message == "session x: head_dim 16 != model 32");
  fs::remove(file);
}

TEST_CASE("V4.1 bind checks the one tensor list and names the tensor", "[compute][v41]") {
  const fs::path dir = test::synth_container("tiny-v41");
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  auto trunk = Trunk::load(dir, info->manifest);
  REQUIRE(trunk);
  ModelConfig c = info->manifest.config;
  auto ok_bind = model::ModelWeights::bind(c, *trunk);
  INFO((ok_bind ? std::string() : ok_bind.error().message));
  REQUIRE(ok_bind);
  CHECK(ok_bind->layers[3].csa_w.i_wk.rows == c.index_head_dim);
  CHECK(ok_bind->layers[3].csa_w.i_wk.cols == c.head_dim);
  CHECK(ok_bind->layers[0].moe_w.bias_vl.size() == std::size_t(c.n_experts));
  CHECK(ok_bind->layers[2].csa_w.c_wkv.payload == nullptr);  // not a KV source

  // Layer 2 made a KV source: its compressor is missing from the container.
  ModelConfig more = c;
  more.kv_source_layer_ids = {1, 2, 3};
  auto missing = model::ModelWeights::bind(more, *trunk);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message == "tensor model.layers.2.self_attn.compressor.wkv.weight: missing");

  // o_lora_rank 8: wo_a has the container's 32 rows, the list wants 16.
  ModelConfig narrow = c;
  narrow.o_lora_rank = 8;
  auto misshaped = model::ModelWeights::bind(narrow, *trunk);
  REQUIRE_FALSE(misshaped);
  CHECK(misshaped.error().message ==
        "tensor model.layers.0.self_attn.wo_a.weight: expected shape [16, 64], found [32, 64]");

  // The list the bind checks is the one synth wrote: every required name is in the trunk.
  for (const V41Tensor& t : v41_trunk_tensors(c)) {
    INFO(t.name);
    CHECK(trunk->find(t.name) != nullptr);
  }
}

TEST_CASE("V4.1 engram layers are refused at the layer loop's Engram spot", "[compute][v41]") {
  // The engine binds the Engram gate tensors; the rows are not wired: the first pass refuses.
  const fs::path dir = test::synth_container("tiny-v41");
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  ModelConfig c = info->manifest.config;
  c.engram_layer_ids = {1};
  const forward::ModelPlan plan = forward::plan_model(c);
  CHECK(plan.layers[1].engram);
  CHECK_FALSE(plan.layers[0].engram);
}

}  // namespace waste

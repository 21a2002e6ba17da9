// DeepSeek-V4.1-Flash through the engine's layer loop (families/deepseek_v41.cpp): the tiny-v41
// synth container (every mechanism on: window ring wrapping, compress ratios 0/2/1, two KV
// sources, three index sources of which one is the candidate source and a later one scores
// inside its blocks, index_topk below the groups, single-pass mHC, the noaux gate with
// gate_temp and route_scale) opens and runs; chunked prefill of decode-kind tokens (chunks of
// 1, 3 and all; 1 or 3 threads; with lookahead) gives the bits of token-at-a-time decode,
// prompt-kind chunks within 1e-5 of
// them; a batch of two sequences gives each its bits alone; a session saved mid-sequence
// continues with identical logits and a mismatched head_dim is refused; the bind checks the
// one tensor list (shared/container/v41_tensors.hpp) and names the tensor; image-span tokens
// (fed with embedding rows) select with bias_vl (as text without one), give token-at-a-time bits
// in a chunk whatever their ids, and leave DEAD entries in the carried n-gram history. The float64 oracle
// of the whole model is tests/reference's (another file); this file checks self-consistency.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "compute/api/engine.hpp"
#include "compute/api/engine_open.hpp"
#include "compute/io/daemon_connect.hpp"
#include "compute/engram/engram_json.hpp"
#include "compute/engram/engram_read_meter.hpp"
#include "compute/engram/engram_synth.hpp"
#include "compute/engram/primes.hpp"
#include "compute/forward/families/family.hpp"
#include "compute/forward/moe.hpp"
#include "compute/model/weights.hpp"
#include "compute/session/session_file.hpp"
#include "shared/container/container.hpp"
#include "shared/container/trunk.hpp"
#include "shared/container/v41_tensors.hpp"
#include "shared/synth/synth.hpp"
#include "lut_mode_guard.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Engine> open_v41(int ctx = 64, int chunk = 64, int threads = 2, int lookahead = 0) {
  EngineOptions o;
  o.model = test::synth_container("tiny-v41");
  o.threads = threads;
  o.ctx_tokens = ctx;
  o.prefill_chunk = chunk;
  o.lookahead = lookahead;
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
  // f32 tables: the prompt-kind check below holds matrix products to 1e-5 of the LUT path, the
  // f32 tables' accuracy (q16, the default on AVX-512 VBMI, is within 2e-3: docs/QUALITY.md).
  test::LutModeGuard lut_mode(forward::LutMode::f32);
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
  // One thread or three, a lookahead prefetch of the next layer's experts: the same bits.
  for (auto [threads, lookahead] : {std::pair{1, 0}, std::pair{3, 4}}) {
    INFO("threads " << threads << ", lookahead " << lookahead);
    auto e = open_v41(64, 3, threads, lookahead);
    auto l = e->eval(t, {}, FeedKind::decode);
    REQUIRE(l);
    CHECK(same_bits(copy(*l), want.back()));
  }
  // Prompt tokens take the experts by matrix products (expert_batch.hpp): close, maybe not bits.
  auto p = open_v41();
  auto l = p->eval(t, {}, FeedKind::prompt);
  REQUIRE(l);
  const float err = max_abs_diff(copy(*l), want.back());
  WARN("prompt-kind prefill vs decode: max |diff| " << err);
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

// tiny-v41 with Engram on layer 1 (2- and 3-grams, 2 heads each: 4 rows of 32 per token; the
// primes drawn from 50 are 53, 59, 61, 67, so 240 rows), written once per test process. Another
// engram_vocab draws larger primes (the table's rows: their sum), spreading the rows over more pages.
fs::path engram_container(bool with_tables, std::uint64_t engram_vocab = 50) {
  const std::string suffix = engram_vocab == 50 ? "" : "-" + std::to_string(engram_vocab);
  const fs::path dir = test::synth_container("tiny-v41").parent_path() /
                       ((with_tables ? "tiny-v41-engram" : "tiny-v41-engram-no-tables") + suffix);
  if (fs::exists(dir / "manifest.json")) return dir;
  auto preset = synth::load_preset("tiny-v41");
  REQUIRE(preset);
  nlohmann::json j = *preset;
  auto primes = engram::draw_bucket_primes(1, 3, 2, engram_vocab);
  REQUIRE(primes);
  std::uint64_t rows = 0;
  for (const auto& n : (*primes)[0]) {
    for (std::uint64_t p : n) rows += p;
  }
  j["engram_layer_ids"] = {1};
  j["engram_num_embeddings"] = {rows};
  j["engram_vocab_size"] = engram_vocab;
  j["engram_max_ngram_size"] = 3;
  j["engram_n_heads"] = 2;
  j["engram_head_dim"] = 32;
  j["engram_pad_id"] = 2;
  j["engram_compressed_vocab_size"] = 200;
  auto spec = synth::make_spec(j, synth::SynthRequest{});
  INFO((spec ? std::string() : spec.error().message));
  REQUIRE(spec);
  REQUIRE(synth::write_container(*spec, dir));
  if (with_tables) {
    engram::SynthEngramRequest r;
    r.seed = 7;
    r.bits = 8;
    auto written = engram::write_synthetic_engram(spec->skeleton.config, dir, r);
    INFO((written ? std::string() : written.error().message));
    REQUIRE(written);
  }
  return dir;
}

std::unique_ptr<Engine> open_engram(int chunk = 64) {
  EngineOptions o;
  o.model = engram_container(true);
  o.threads = 2;
  o.ctx_tokens = 64;
  o.prefill_chunk = chunk;
  o.lookahead = 0;
  auto engine = Engine::open(o);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return std::move(*engine);
}

std::vector<std::vector<float>> decode_each_engram(const std::vector<int>& t) {
  auto e = open_engram();
  std::vector<std::vector<float>> out;
  for (int tok : t) {
    auto l = e->eval(std::span<const int>(&tok, 1), {}, FeedKind::decode);
    INFO((l ? std::string() : l.error().message));
    REQUIRE(l);
    out.push_back(copy(*l));
  }
  return out;
}

TEST_CASE("V4.1 engram layers bind their gate tensors and need the container's Engram tables", "[compute][v41]") {
  const fs::path dir = engram_container(false);
  auto info = ContainerInfo::open(dir);
  INFO((info ? std::string() : info.error().message));
  REQUIRE(info);
  const forward::ModelPlan plan = forward::plan_model(info->manifest.config);
  CHECK(plan.layers[1].engram);
  CHECK_FALSE(plan.layers[0].engram);
  auto trunk = Trunk::load(dir, info->manifest);
  REQUIRE(trunk);
  auto w = model::ModelWeights::bind(info->manifest.config, *trunk);
  INFO((w ? std::string() : w.error().message));
  REQUIRE(w);
  CHECK(w->layers[1].engram);
  CHECK(w->layers[1].engram_w.wkv.rows == 5 * 64);
  CHECK(w->layers[1].engram_w.wkv.cols == 2 * 2 * 32);
  CHECK(w->layers[1].engram_w.q_weight.size() == 4u * 64u);

  // Without engram.json and the tables the engine does not open, and says which file.
  EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.ctx_tokens = 32;
  auto engine = Engine::open(o);
  REQUIRE_FALSE(engine);
  CHECK(engine.error().message.find("engram.json") != std::string::npos);
}

TEST_CASE("V4.1 Engram rows: chunked prefill, batches and sessions give token-at-a-time bits", "[compute][v41][engram]") {
  const std::vector<int> t = tokens(24, 6);
  const auto want = decode_each_engram(t);
  for (int chunk : {1, 3, 64}) {
    INFO("prefill chunk " << chunk);
    auto e = open_engram(chunk);
    auto l = e->eval(t, {}, FeedKind::decode);
    INFO((l ? std::string() : l.error().message));
    REQUIRE(l);
    CHECK(same_bits(copy(*l), want.back()));
  }
  // The n-gram look-back matters: the same last token after another history differs.
  {
    auto e = open_engram();
    std::vector<int> other = tokens(23, 8);
    other.push_back(t.back());
    auto l = e->eval(other, {}, FeedKind::decode);
    REQUIRE(l);
    CHECK(max_abs_diff(copy(*l), want.back()) > 1e-3f);
  }
  // Two sequences in one batch: each gets its bits alone.
  {
    const std::vector<int> b = tokens(13, 9);
    const auto want_b = decode_each_engram(b);
    auto e = open_engram();
    auto sa = e->new_sequence();
    auto sb = e->new_sequence();
    REQUIRE(sa);
    REQUIRE(sb);
    const SequenceFeed first[2] = {{sa->get(), std::span<const int>(t.data(), 10), {}, FeedKind::decode},
                                   {sb->get(), std::span<const int>(b), {}, FeedKind::decode}};
    const Status fed = e->feed_batch(first);
    INFO((fed ? std::string() : fed.error().message));
    REQUIRE(fed);
    CHECK(same_bits(copy((*sa)->logits()), want[9]));
    CHECK(same_bits(copy((*sb)->logits()), want_b.back()));
  }
  // A session saved at 17 tokens carries the look-back: the continuation has the same bits;
  // with the look-back cleared (all -1) it does not.
  const fs::path file = fs::temp_directory_path() / ("waste-v41-engram-session-" + std::to_string(getpid()));
  auto a = open_engram();
  REQUIRE(a->eval(std::span<const int>(t.data(), 17), {}, FeedKind::decode));
  REQUIRE(session::save(*a, file));
  const ModelConfig& c = a->config();
  CHECK(fs::file_size(file) == session::session_bytes(c, session::make_header(c, a->run_state())));
  auto b = open_engram();
  const Status loaded = session::load(*b, file);
  INFO((loaded ? std::string() : loaded.error().message));
  REQUIRE(loaded);
  auto l = b->eval(std::span<const int>(t.data() + 17, 7), {}, FeedKind::decode);
  REQUIRE(l);
  CHECK(same_bits(copy(*l), want.back()));

  std::vector<std::byte> bytes = session::encode(c, a->run_state());
  const std::int32_t dead[2] = {-1, -1};
  std::memcpy(bytes.data() + bytes.size() - sizeof dead, dead, sizeof dead);
  auto d = open_engram();
  REQUIRE(session::decode_into(bytes, c, d->run_state(), "cleared"));
  auto ld = d->eval(std::span<const int>(t.data() + 17, 7), {}, FeedKind::decode);
  REQUIRE(ld);
  CHECK(max_abs_diff(copy(*ld), want.back()) > 0.0f);

  // A look-back id outside the compressed vocabulary is refused by name.
  const std::int32_t bad[2] = {200, -1};
  std::memcpy(bytes.data() + bytes.size() - sizeof bad, bad, sizeof bad);
  const Status refused = session::validate(bytes, c, a->run_state(), "x");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message == "session x: engram history entry 0: id 200 is outside -1..199");
  fs::remove(file);
}

// Issue 29: without a caller's source the engine reads the Engram rows through the data plane's
// page pool (DaemonEngramRows on the plane's second lease); the same plane with the engine's own
// EngramRowSource gives the same logits bit for bit, prompt and decode steps alike, and the pool's
// reader counts every row the forward asked for as a page hit or miss reported by the server.
TEST_CASE("V4.1 Engram rows through the data plane's page pool give the engine's own reads' bits", "[compute][v41][engram]") {
  EngineOptions o;
  o.model = engram_container(true);
  o.threads = 2;
  o.ctx_tokens = 64;
  o.prefill_chunk = 64;
  o.lookahead = 0;
  auto container = read_container(o.model);
  REQUIRE(container);

  auto pooled = Engine::open(o);
  INFO((pooled ? std::string() : pooled.error().message));
  REQUIRE(pooled);
  CHECK((*pooled)->engram_origin() == "Engram rows: the in-process data plane's shared page pool");

  auto parts = open_expert_plane(o, **container);
  INFO((parts ? std::string() : parts.error().message));
  REQUIRE(parts);
  REQUIRE(parts->engram_rows);
  REQUIRE(parts->engram_tables);
  parts->engram_rows.reset();
  parts->engram_tables.reset();
  parts->engram_note = "the test dropped the pool's reader";
  auto own = Engine::open(o, *container, std::move(*parts));
  INFO((own ? std::string() : own.error().message));
  REQUIRE(own);
  CHECK((*own)->engram_origin() == "Engram rows: read by this process (the test dropped the pool's reader)");

  const std::vector<int> prompt = tokens(9, 4), steps = tokens(5, 9);
  auto a = (*pooled)->eval(prompt, {}, FeedKind::prompt);
  auto b = (*own)->eval(prompt, {}, FeedKind::prompt);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(same_bits(copy(*a), copy(*b)));
  for (int tok : steps) {
    INFO("decode token " << tok);
    auto x = (*pooled)->eval(std::span<const int>(&tok, 1), {}, FeedKind::decode);
    auto y = (*own)->eval(std::span<const int>(&tok, 1), {}, FeedKind::decode);
    REQUIRE(x);
    REQUIRE(y);
    CHECK(same_bits(copy(*x), copy(*y)));
  }

  const auto ps = (*pooled)->engram_stats(), os = (*own)->engram_stats();
  REQUIRE(ps);
  REQUIRE(os);
  // 14 tokens, one Engram layer, 2 n-gram sizes x 2 heads: 56 rows asked for by either reader.
  CHECK(ps->hits + ps->misses == 56);
  CHECK(os->hits + os->misses == 56);
  // The forward prefetches each token's pages ahead of read_rows: the pool's reader asked the
  // server for them (engram_prefetch) and the demands that followed found them resident (hits;
  // a page still being read would count as a miss, so only "some hits" is certain).
  CHECK(ps->prefetched > 0);
  CHECK(ps->hits > 0);
}

TEST_CASE("V4.1 flash preset parses at the real shapes and --layers cuts it", "[compute][v41]") {
  for (int layers : {0, 3, 21}) {
    INFO("--layers " << layers);
    synth::SynthRequest r;
    r.preset = "deepseek-v4.1-flash";
    r.layers = layers;
    auto spec = synth::make_spec(r);
    INFO((spec ? std::string() : spec.error().message));
    REQUIRE(spec);
    const ModelConfig& c = spec->skeleton.config;
    CHECK(c.n_layers == (layers == 0 ? 40 : layers));
    CHECK(c.compress_ratios.size() == std::size_t(c.n_layers));
    CHECK(c.hidden == 5120);
    CHECK(c.head_dim == 512);
    const auto tensors = synth::plan_trunk(*spec);
    CHECK(tensors.size() == v41_trunk_tensors(c).size());
    const forward::ModelPlan plan = forward::plan_model(c);
    CHECK(plan.family == "deepseek-v4.1");
    if (layers == 3) {
      CHECK(c.kv_source_layer_ids == std::vector<int>{2});
      CHECK(c.index_source_layer_ids == std::vector<int>{2});
      CHECK(c.candidate_source_layer_id == 2);
      CHECK(c.engram_layer_ids == std::vector<int>{1});
    }
    if (layers == 21) {
      CHECK(c.candidate_source_layer_id == 20);
      CHECK(c.engram_layer_ids == std::vector<int>{1, 14});
      CHECK(plan.layers[20].csa2.candidate_source);
    }
    if (layers == 0) {
      CHECK(plan.layers[24].csa2.uses_candidates);
      CHECK(plan.layers[19].kv_source == 14);
      CHECK(c.engram_num_embeddings == std::vector<std::int64_t>{384006168, 384016682});
    }
  }
}

namespace {

// Input vectors for an image span (hidden floats each, a fixed pattern per position).
std::vector<std::vector<float>> span_rows(int hidden, int n) {
  std::vector<std::vector<float>> rows{std::size_t(n), std::vector<float>(std::size_t(hidden))};
  for (int p = 0; p < n; ++p) {
    for (int i = 0; i < hidden; ++i) rows[std::size_t(p)][std::size_t(i)] = std::sin(0.37f * float(i + 1) * float(p + 3));
  }
  return rows;
}

// One pointer per token of t: the span [first, first + rows.size()) gets its rows.
std::vector<const float*> span_ptrs(std::size_t n, int first, const std::vector<std::vector<float>>& rows) {
  std::vector<const float*> out(n, nullptr);
  for (std::size_t i = 0; i < rows.size(); ++i) out[std::size_t(first) + i] = rows[i].data();
  return out;
}

}  // namespace

// Issue 29: a token fed with an embedding row is an image-span token: it routes with gate.bias_vl
// (the float64 oracle checks which experts: tests/reference, run_diff --image-span), is DEAD in
// the n-gram history and gets Engram gate 0. Here: a span inside a chunk gives token-at-a-time
// bits, the span's token ids do not change the logits, and the history a session carries holds
// the span's tokens as -1.
TEST_CASE("V4.1 image span: chunked gives token-at-a-time bits and the span's token ids do not matter",
          "[compute][v41][engram]") {
  const std::vector<int> t = tokens(24, 6);
  const int first = 9, n_span = 6;
  const int hidden = open_engram()->config().hidden;
  const auto rows = span_rows(hidden, n_span);
  const std::vector<const float*> media = span_ptrs(t.size(), first, rows);
  auto decode_each_media = [&](const std::vector<int>& ids) {
    auto e = open_engram();
    std::vector<std::vector<float>> out;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::span<const float* const> one = std::span<const float* const>(media).subspan(i, 1);
      auto l = e->eval(std::span<const int>(ids.data() + i, 1), media[i] ? one : std::span<const float* const>{},
                       FeedKind::decode);
      INFO((l ? std::string() : l.error().message));
      REQUIRE(l);
      out.push_back(copy(*l));
    }
    return out;
  };
  const auto want = decode_each_media(t);
  const auto text = decode_each_engram(t);
  // The span moves the logits of its own tokens and of the text after it.
  CHECK(max_abs_diff(want[std::size_t(first)], text[std::size_t(first)]) > 1e-3f);
  CHECK(max_abs_diff(want.back(), text.back()) > 0.0f);
  CHECK(same_bits(want[std::size_t(first - 1)], text[std::size_t(first - 1)]));

  // Other ids under the span: the same bits, token at a time and chunked.
  std::vector<int> other = t;
  for (int p = first; p < first + n_span; ++p) other[std::size_t(p)] = (other[std::size_t(p)] * 7 + 101) % 250 + 3;
  REQUIRE(other != t);
  const auto want_other = decode_each_media(other);
  for (std::size_t i = 0; i < t.size(); ++i) CHECK(same_bits(want_other[i], want[i]));

  for (int chunk : {4, 64}) {
    const std::vector<int>* const feeds[2] = {&t, &other};
    for (const std::vector<int>* ids : feeds) {
      INFO("prefill chunk " << chunk << (ids == &t ? "" : ", other ids under the span"));
      auto e = open_engram(chunk);
      auto l = e->eval(*ids, media, FeedKind::decode);
      INFO((l ? std::string() : l.error().message));
      REQUIRE(l);
      CHECK(same_bits(copy(*l), want.back()));
    }
  }

  // In a batch beside a text sequence: each gets its bits alone.
  {
    const std::vector<int> b = tokens(13, 9);
    const auto want_b = decode_each_engram(b);
    auto e = open_engram();
    auto sa = e->new_sequence();
    auto sb = e->new_sequence();
    REQUIRE(sa);
    REQUIRE(sb);
    const SequenceFeed feeds[2] = {{sb->get(), std::span<const int>(b), {}, FeedKind::decode},
                                   {sa->get(), std::span<const int>(t), media, FeedKind::decode}};
    const Status fed = e->feed_batch(feeds);
    INFO((fed ? std::string() : fed.error().message));
    REQUIRE(fed);
    CHECK(same_bits(copy((*sa)->logits()), want.back()));
    CHECK(same_bits(copy((*sb)->logits()), want_b.back()));
  }

  // After the span's third token the carried look-back (newest first) is DEAD, DEAD.
  auto e = open_engram();
  REQUIRE(e->eval(std::span<const int>(t.data(), std::size_t(first + 3)),
                  std::span<const float* const>(media.data(), std::size_t(first + 3)), FeedKind::decode));
  const std::span<const std::int32_t> recent = e->run_state().ngram_history().recent();
  REQUIRE(recent.size() == 2u);
  CHECK(recent[0] == -1);
  CHECK(recent[1] == -1);
}

// route() for DeepSeek-V4.1: an image-span token selects with bias_vl in place of the correction
// bias (the weights stay the unbiased scores); a container without bias_vl routes it as text.
TEST_CASE("V4.1 route(): an image token selects with bias_vl, as text without one", "[compute][v41][routing]") {
  ModelConfig c;
  c.arch = "deepseek-v4.1";
  c.scoring = RouterScoring::sqrtsoftplus;
  c.n_experts = 4;
  c.top_k = 2;
  c.renormalize = true;
  c.routed_scale = 1.5f;
  model::MoeWeights w;
  w.score_bias = {0.0f, 0.0f, 2.0f, 0.0f};  // text: expert 2 pulled in
  w.bias_vl = {0.0f, 0.0f, 0.0f, 3.0f};     // image: expert 3 instead
  const float logits[4] = {2.0f, 1.0f, 0.0f, -1.0f};
  forward::MoeScratch s;
  s.probs.resize(4);
  s.scored.resize(4);
  s.taken.resize(4);
  s.ids.resize(2);
  s.weights.resize(2);
  auto p = [](double x) { return std::sqrt(std::log1p(std::exp(x))); };
  forward::route(c, w, logits, s, false);
  CHECK(s.ids == std::vector<int>{2, 0});
  forward::route(c, w, logits, s, true);
  CHECK(s.ids == std::vector<int>{3, 0});
  CHECK(s.weights[0] == Approx(1.5 * p(-1.0) / (p(-1.0) + p(2.0))).epsilon(1e-6));
  w.bias_vl.clear();
  forward::route(c, w, logits, s, true);
  CHECK(s.ids == std::vector<int>{2, 0});
}

}  // namespace waste

namespace waste {
namespace {

// The reads a run implies, from the layout alone: each pass (the prompt, then one decode step
// per token) asks every row of its tokens once (one read_rows call: one Engram layer, one run).
struct ImpliedReads {
  std::uint64_t asked = 0;
  std::uint64_t distinct_rows = 0, distinct_pages = 0;
  std::uint64_t row_misses = 0;   // rows not read by an earlier pass (a cold row cache)
  std::uint64_t page_misses = 0;  // rows whose page no earlier pass read (a cold page pool)
  std::uint64_t prefetch_pages = 0;  // distinct pages of each pass, summed
};

ImpliedReads implied_reads(const fs::path& dir, const std::vector<std::vector<int>>& passes) {
  auto tables = engram::load_engram_tables(dir);
  REQUIRE(tables);
  REQUIRE(tables->layout.layers.size() == 1);
  auto source = engram::EngramRowSource::open(dir, tables->layout);
  REQUIRE(source);
  const std::uint64_t per_page = source->header(0).rows_per_page();
  engram::NgramHistory history(tables->layout.max_ngram_size);
  std::set<std::uint64_t> rows_seen, pages_seen;
  ImpliedReads r;
  for (const auto& pass : passes) {
    const std::vector<std::int32_t> ids(pass.begin(), pass.end());
    auto rows = engram::sequence_row_ids(*tables, ids, {}, history);
    REQUIRE(rows);
    r.asked += rows->size();
    std::set<std::uint64_t> pass_pages;
    for (std::uint64_t row : *rows) {
      if (rows_seen.count(row) == 0) ++r.row_misses;
      if (pages_seen.count(row / per_page) == 0) ++r.page_misses;
      pass_pages.insert(row / per_page);
    }
    for (std::uint64_t row : *rows) rows_seen.insert(row);
    pages_seen.insert(pass_pages.begin(), pass_pages.end());
    r.prefetch_pages += pass_pages.size();
  }
  r.distinct_rows = rows_seen.size();
  r.distinct_pages = pages_seen.size();
  return r;
}

// Restores (or clears) WASTE_ENGRAM_READAHEAD when the test ends.
struct ReadaheadEnv {
  explicit ReadaheadEnv(const char* value) { ::setenv("WASTE_ENGRAM_READAHEAD", value, 1); }
  ~ReadaheadEnv() { ::unsetenv("WASTE_ENGRAM_READAHEAD"); }
};

}  // namespace

// Issue 29: read-ahead off (no prefetch: rows read when the Engram layer asks) gives the logits
// of read-ahead on bit for bit, through the data plane's page pool and through the engine's own
// EngramRowSource; the counters are what the layout implies for the tokens fed.
TEST_CASE("V4.1 Engram read-ahead off gives the same bits and the reads the layout implies", "[compute][v41][engram]") {
  const fs::path dir = engram_container(true, 3000);  // 12,054 rows of 34 bytes: 101 pages of 120 rows
  EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.ctx_tokens = 64;
  o.prefill_chunk = 64;
  o.lookahead = 0;
  auto container = read_container(o.model);
  REQUIRE(container);
  struct Opened {
    const char* name;
    bool pool;
    bool readahead;
    std::unique_ptr<Engine> engine;
  };
  std::vector<Opened> engines;
  for (bool pool : {true, false}) {
    for (bool readahead : {true, false}) {
      EngineOptions x = o;
      x.engram_readahead = readahead;
      Result<std::unique_ptr<Engine>> e = std::unique_ptr<Engine>();
      if (pool) {
        e = Engine::open(x);
      } else {
        auto parts = open_expert_plane(x, **container);
        REQUIRE(parts);
        parts->engram_rows.reset();
        parts->engram_tables.reset();
        e = Engine::open(x, *container, std::move(*parts));
      }
      INFO((e ? std::string() : e.error().message));
      REQUIRE(e);
      CHECK((*e)->engram_readahead() == readahead);
      engines.push_back({pool ? "pool" : "own", pool, readahead, std::move(*e)});
    }
  }
  CHECK(engines[0].engine->engram_origin() == "Engram rows: the in-process data plane's shared page pool");

  const std::vector<int> prompt = tokens(12, 5), steps = tokens(6, 2);
  std::vector<std::vector<int>> passes{prompt};
  for (int tok : steps) passes.push_back({tok});
  for (std::size_t p = 0; p < passes.size(); ++p) {
    INFO("pass " << p);
    std::vector<float> first;
    for (auto& e : engines) {
      INFO(e.name << " read-ahead " << e.readahead);
      auto l = e.engine->eval(passes[p], {}, p == 0 ? FeedKind::prompt : FeedKind::decode);
      INFO((l ? std::string() : l.error().message));
      REQUIRE(l);
      if (first.empty()) {
        first = copy(*l);
      } else {
        CHECK(same_bits(copy(*l), first));
      }
    }
  }

  const ImpliedReads want = implied_reads(dir, passes);
  CHECK(want.asked == 18u * 4u);  // 18 tokens, one layer, 2 n-gram sizes x 2 heads
  CHECK(want.distinct_pages > 10);
  for (const auto& e : engines) {
    INFO(e.name << " read-ahead " << e.readahead);
    const auto s = e.engine->engram_stats();
    REQUIRE(s);
    CHECK(s->rows_asked == want.asked);
    CHECK(s->hits + s->misses == want.asked);
    CHECK(s->wait_seconds > 0.0);
    CHECK(s->bytes_read % 4096 == 0);
    if (e.pool) {
      // The pool counts pages: with read-ahead off nothing is asked ahead, each page is read once
      // on its first demand (a cold pool): pages x 4096 bytes, and a row misses when its page does.
      if (!e.readahead) {
        CHECK(s->prefetched == 0);
        CHECK(s->bytes_read == want.distinct_pages * 4096);
        CHECK(s->misses == want.page_misses);
      } else {
        CHECK(s->prefetched == want.prefetch_pages);  // each pass's pages asked ahead once
        CHECK(s->bytes_read <= want.distinct_pages * 4096);
      }
    } else {
      // The row cache: the reader threads read every distinct row once, either way; with
      // read-ahead off a row misses unless an earlier pass read it. A read is a 4 KiB page that
      // serves the rows of its page in one chunk: between one read per page and one per row.
      CHECK(s->prefetched == want.distinct_rows);
      if (!e.readahead) CHECK(s->misses == want.row_misses);
      CHECK(s->bytes_read >= want.distinct_pages * 4096);
      CHECK(s->bytes_read <= want.distinct_rows * 4096);
    }
  }
}

TEST_CASE("WASTE_ENGRAM_READAHEAD decides the engine's read-ahead unless the options do", "[compute][v41][engram]") {
  CHECK(*engram::parse_engram_readahead("on", "x"));
  CHECK(*engram::parse_engram_readahead("1", "x"));
  CHECK_FALSE(*engram::parse_engram_readahead("off", "x"));
  CHECK_FALSE(*engram::parse_engram_readahead("0", "x"));
  auto bad = engram::parse_engram_readahead("yes", "--engram-readahead");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "--engram-readahead: 'yes' is not on or off (1 or 0)");

  EngineOptions o;
  o.model = engram_container(true);
  o.threads = 1;
  o.ctx_tokens = 32;
  o.lookahead = 0;
  {
    auto e = Engine::open(o);
    REQUIRE(e);
    CHECK((*e)->engram_readahead());
  }
  {
    ReadaheadEnv env("0");
    auto e = Engine::open(o);
    REQUIRE(e);
    CHECK_FALSE((*e)->engram_readahead());
    o.engram_readahead = true;  // the option wins over the environment
    auto f = Engine::open(o);
    REQUIRE(f);
    CHECK((*f)->engram_readahead());
    o.engram_readahead.reset();
  }
  {
    ReadaheadEnv env("maybe");
    auto e = Engine::open(o);
    REQUIRE_FALSE(e);
    CHECK(e.error().message == o.model.string() + ": WASTE_ENGRAM_READAHEAD: 'maybe' is not on or off (1 or 0)");
    // A model without Engram layers does not read the variable.
    EngineOptions plain = o;
    plain.model = test::synth_container("tiny-v41");
    auto g = Engine::open(plain);
    INFO((g ? std::string() : g.error().message));
    REQUIRE(g);
    CHECK_FALSE((*g)->engram_readahead());
    CHECK_FALSE((*g)->engram_stats());
  }
}

}  // namespace waste

// Chunked prefill (waste-v0-reference.md §3.10): last-token logits and the decode steps after
// it agree with token-by-token feeding; each chunk reads exactly its distinct experts, once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "compute/api/engine.hpp"
#include "compute/forward/expert_batch.hpp"
#include "int8_prefill_guard.hpp"
#include "local_expert_source.hpp"
#include "shared/container/container.hpp"
#include "shared/synth/synth.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

std::vector<int> prompt_of(int n, int vocab) {
  std::vector<int> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 53 + 11) % vocab);
  return p;
}

EngineOptions options_for(const std::filesystem::path& dir, int chunk) {
  EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.ctx_tokens = 96;
  o.prefill_chunk = chunk;
  o.lookahead = 0;
  return o;
}

std::unique_ptr<Engine> open(const EngineOptions& o, std::unique_ptr<ExpertSource> source = nullptr) {
  auto engine = Engine::open(o, std::move(source));
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return std::move(*engine);
}

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  float d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

int argmax(std::span<const float> v) { return int(std::max_element(v.begin(), v.end()) - v.begin()); }

// Logs every request (layer, ids) of a synchronous, cacheless local source.
class RecordingSource final : public ExpertSource {
 public:
  explicit RecordingSource(std::unique_ptr<LocalExpertSource> inner) : inner_(std::move(inner)) {}
  Status request(int layer, std::span<const int> experts) override {
    log.emplace_back(layer, std::vector<int>(experts.begin(), experts.end()));
    return inner_->request(layer, experts);
  }
  Result<ExpertView> acquire(int layer, int expert) override { return inner_->acquire(layer, expert); }
  Result<ReadyExpert> acquire_next(int layer) override { return inner_->acquire_next(layer); }
  void release_layer(int layer) override { inner_->release_layer(layer); }
  void prefetch(int layer, std::span<const int> experts) override { inner_->prefetch(layer, experts); }
  [[nodiscard]] ExpertSourceStats stats() const override { return inner_->stats(); }
  [[nodiscard]] bool direct_io() const override { return inner_->direct_io(); }
  std::vector<std::pair<int, std::vector<int>>> log;

 private:
  std::unique_ptr<LocalExpertSource> inner_;
};

std::unique_ptr<RecordingSource> recording(const std::filesystem::path& dir, int readers) {
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  auto local = LocalExpertSource::open(*info, LocalSourceOptions{false, false, 0, readers});
  REQUIRE(local);
  return std::make_unique<RecordingSource>(std::move(*local));
}


}  // namespace

TEST_CASE("Chunked prefill matches token-by-token feeding, then decodes the same", "[compute][prefill]") {
  // f32 trunk products too: prompt tokens take int8 ones by default (int8_prefill_guard.hpp).
  test::Int8PrefillGuard int8(false);
  // The LUT path only: prefill by matrix products keeps the bound, not the bits (test_expert_batch.cpp).
  const int saved = forward::expert_batch::min_tokens();
  forward::expert_batch::set_min_tokens(0);
  struct Restore {
    int saved;
    ~Restore() { forward::expert_batch::set_min_tokens(saved); }
  } restore{saved};
  // kl-shaped-vq4p: VQ4P experts, whose tokens sharing an expert in a chunk are applied in groups
  // (run_expert_tokens) and must keep each token's bits.
  for (const char* preset : {"tiny", "tiny-k3", "kl-shaped", "tiny-glm", "kl-shaped-vq4p"}) {
    for (int chunk : {64, 16, 5}) {
      INFO(preset << ", chunk " << chunk);
      const auto dir = std::string_view(preset) == "kl-shaped-vq4p" ? test::kl_shaped("vq4p") : test::container_for(preset);
      auto seq = open(options_for(dir, 1));
      auto chunked = open(options_for(dir, chunk));
      // 41 tokens: one chunk of 41; 16+16+9; eight chunks of 5 and a 1-token remainder (decode step).
      const auto prompt = prompt_of(41, seq->config().vocab);
      auto a = seq->eval(prompt);
      auto b = chunked->eval(prompt);
      REQUIRE(a);
      REQUIRE(b);
      CHECK(seq->position() == 41);
      CHECK(chunked->position() == 41);
      CHECK(max_abs_diff(*a, *b) <= 1e-4f);
      CHECK(argmax(*a) == argmax(*b));
      // Stronger, for this implementation: the batched projections (matvec_tokens) give each token
      // the bits of its matvec, and the recurrences run per token in order, so the bits agree too
      // (a batched kernel with other rounding would keep only the bound above).
      CHECK(std::memcmp(a->data(), b->data(), a->size() * sizeof(float)) == 0);
      // Fewer reads: a chunk reads each distinct expert once instead of once per token.
      CHECK(chunked->stats().misses < seq->stats().misses);

      // The state a chunk leaves behind (KDA, MLA cache, AttnRes blocks) drives decode alike.
      for (int step = 0; step < 16; ++step) {
        const int next[1] = {argmax(seq->logits())};
        REQUIRE(argmax(chunked->logits()) == next[0]);
        auto sa = seq->eval(next);
        auto sb = chunked->eval(next);
        REQUIRE(sa);
        REQUIRE(sb);
        CHECK(max_abs_diff(*sa, *sb) <= 1e-4f);
      }
    }
  }
}

TEST_CASE("A prefill chunk reads each of its distinct experts exactly once", "[compute][prefill]") {
  for (const char* preset : {"tiny", "tiny-k3", "kl-shaped"}) {
    for (int readers : {0, 2}) {
      INFO(preset << ", readers " << readers);
      const auto dir = test::container_for(preset);
      auto info = ContainerInfo::open(dir);
      REQUIRE(info);
      const std::uint64_t rec = info->geometry.record_bytes;

      // Token by token: which experts each layer used over the first 24 tokens.
      auto seq_src = recording(dir, readers);
      RecordingSource* seq_log = seq_src.get();
      auto seq = open(options_for(dir, 1), std::move(seq_src));
      const auto prompt = prompt_of(24, seq->config().vocab);
      REQUIRE(seq->eval(prompt));
      std::map<int, std::set<int>> expected;
      for (const auto& [layer, ids] : seq_log->log) expected[layer].insert(ids.begin(), ids.end());

      auto chunk_src = recording(dir, readers);
      RecordingSource* chunk_log = chunk_src.get();
      auto chunked = open(options_for(dir, 24), std::move(chunk_src));
      REQUIRE(chunked->eval(prompt));

      std::map<int, std::vector<int>> requested;
      for (const auto& [layer, ids] : chunk_log->log) {
        requested[layer].insert(requested[layer].end(), ids.begin(), ids.end());
      }
      std::uint64_t distinct_total = 0;
      REQUIRE(requested.size() == expected.size());
      for (const auto& [layer, ids] : requested) {
        INFO("layer " << layer);
        const std::set<int>& want = expected[layer];
        CHECK(std::vector<int>(want.begin(), want.end()) == ids);  // ascending id, each once
        distinct_total += want.size();
      }
      const ExpertSourceStats s = chunked->stats();
      CHECK(s.misses == distinct_total);
      CHECK(s.hits == 0);
      CHECK(s.bytes_read == distinct_total * rec);
      CHECK(seq->stats().misses == 24ull * std::uint64_t(seq->config().top_k) * expected.size());

      // With a cache smaller than two windows of the chunk's experts, the chunk reads in windows
      // and prefetches the next window behind the current one: still each expert once, same bits.
      if (readers > 0) {
        const int top_k = seq->config().top_k;
        const std::size_t cache = std::size_t(3 * top_k);  // windows of max(top_k, cache / 2)
        EngineOptions small = options_for(dir, 24);
        small.cache_records = cache;
        auto windowed = open(small);
        auto logits = windowed->eval(prompt);
        REQUIRE(logits);
        CHECK(std::memcmp(logits->data(), chunked->logits().data(), logits->size() * sizeof(float)) == 0);
        const ExpertSourceStats w = windowed->stats();
        CHECK(w.bytes_read == distinct_total * rec);
        CHECK(w.misses + w.hits == distinct_total);
        bool windows = false;
        for (const auto& [layer, want] : expected) windows = windows || want.size() > std::size_t(3 * top_k / 2);
        CHECK(windows);  // some layer needs more than one window
        CHECK(w.prefetch_issued > 0);
      }
    }
  }
}

TEST_CASE("generate prefills the prompt in chunks and produces the same tokens", "[compute][prefill]") {
  const auto dir = test::synth_container("tiny-k3");
  GenerateParams params;
  params.max_tokens = 10;
  params.eos_token = -2;
  auto seq = open(options_for(dir, 1));
  auto chunked = open(options_for(dir, 64));
  const auto prompt = prompt_of(30, seq->config().vocab);
  auto a = seq->generate(prompt, params);
  auto b = chunked->generate(prompt, params);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->tokens == b->tokens);
  CHECK(chunked->stats().misses < seq->stats().misses);
  CHECK(chunked->info().prefill_chunk == 64);
}

TEST_CASE("prefill_chunk and lookahead options are range-checked", "[compute][prefill]") {
  const auto dir = test::synth_container("tiny");
  EngineOptions o = options_for(dir, 513);
  auto e = Engine::open(o);
  REQUIRE_FALSE(e);
  CHECK(e.error().message == "prefill_chunk 513 must be 1..512");
  o.prefill_chunk = 0;
  e = Engine::open(o);
  REQUIRE_FALSE(e);
  CHECK(e.error().message == "prefill_chunk 0 must be 1..512");
  o.prefill_chunk = 8;
  o.lookahead = 65;
  e = Engine::open(o);
  REQUIRE_FALSE(e);
  CHECK(e.error().message == "lookahead 65 must be -1 (auto) or 0..64");
}

}  // namespace waste

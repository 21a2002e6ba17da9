// Read-ahead with overlap: logits do not depend on the reader threads, the cache, the thread
// count, resident experts or the order in which records land (acquire_next); the local
// source's acquire_next hands out every requested record once; a record whose codebook_id
// differs from the manifest's codebook_base is refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "compute/api/engine.hpp"
#include "local_expert_source.hpp"
#include "shared/container/container.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

using Logits = std::vector<std::vector<float>>;

// Logits after each of 16 prompt tokens (fed one by one) and 16 greedy tokens.
Logits run_logits(const EngineOptions& options, std::unique_ptr<ExpertSource> source = nullptr,
                  ExpertSourceStats* stats = nullptr) {
  auto engine = Engine::open(options, std::move(source));
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  const int vocab = (*engine)->config().vocab;
  Logits all;
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
    INFO((logits ? std::string() : logits.error().message));
    REQUIRE(logits);
    all.emplace_back(logits->begin(), logits->end());
  }
  if (stats) *stats = (*engine)->stats();
  return all;
}

bool bit_identical(const Logits& a, const Logits& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

EngineOptions base_options(const std::filesystem::path& dir) {
  EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.ctx_tokens = 64;
  o.reader_threads = 0;
  o.cache_records = 0;
  o.lookahead = 0;
  return o;
}

// Hands records out in reverse or shuffled request order, from a synchronous local source;
// optionally reports a wrong codebook_id.
class ReorderingSource final : public ExpertSource {
 public:
  enum class Order { reverse, shuffled };
  ReorderingSource(std::unique_ptr<LocalExpertSource> inner, Order order, int codebook_shift = 0)
      : inner_(std::move(inner)), order_(order), codebook_shift_(codebook_shift) {}

  Status request(int layer, std::span<const int> experts) override {
    perm_.resize(experts.size());
    for (std::size_t i = 0; i < perm_.size(); ++i) perm_[i] = int(i);
    if (order_ == Order::reverse) {
      std::reverse(perm_.begin(), perm_.end());
    } else {
      for (std::size_t i = perm_.size(); i > 1; --i) {
        rng_ = rng_ * 6364136223846793005ULL + 1442695040888963407ULL;
        std::swap(perm_[i - 1], perm_[std::size_t((rng_ >> 33) % i)]);
      }
    }
    next_ = 0;
    ++requests_;
    return inner_->request(layer, experts);
  }
  Result<ExpertView> acquire(int layer, int expert) override { return inner_->acquire(layer, expert); }
  Result<ReadyExpert> acquire_next(int layer) override {
    const auto ids = requested();
    REQUIRE(requested_layer() == layer);
    REQUIRE(next_ < perm_.size());
    const int index = perm_[next_++];
    if (index != int(next_ - 1)) ++out_of_order_;
    auto view = inner_->acquire(layer, ids[std::size_t(index)]);
    if (!view) return std::unexpected(view.error());
    view->codebook_id += codebook_shift_;
    return ReadyExpert{index, *view};
  }
  void release_layer(int layer) override { inner_->release_layer(layer); }
  void prefetch(int layer, std::span<const int> experts) override { inner_->prefetch(layer, experts); }
  [[nodiscard]] ExpertSourceStats stats() const override { return inner_->stats(); }
  [[nodiscard]] bool direct_io() const override { return inner_->direct_io(); }

  int out_of_order_ = 0;
  int requests_ = 0;

 private:
  std::unique_ptr<LocalExpertSource> inner_;
  Order order_;
  int codebook_shift_;
  std::vector<int> perm_;
  std::size_t next_ = 0;
  std::uint64_t rng_ = 0x9e3779b97f4a7c15ULL;
};

std::unique_ptr<LocalExpertSource> local_source(const std::filesystem::path& dir, LocalSourceOptions o) {
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  auto source = LocalExpertSource::open(*info, o);
  INFO((source ? std::string() : source.error().message));
  REQUIRE(source);
  return std::move(*source);
}

}  // namespace

TEST_CASE("Logits are bit-identical across read-ahead, cache, lookahead, threads and resident experts",
          "[compute][readahead]") {
  for (const char* preset : {"tiny", "tiny-k3"}) {
    INFO(preset);
    const auto dir = test::synth_container(preset);
    ExpertSourceStats sync_stats{};
    const Logits reference = run_logits(base_options(dir), nullptr, &sync_stats);
    const auto& l = reference.back();
    CHECK(std::all_of(l.begin(), l.end(), [](float v) { return std::isfinite(v); }));
    CHECK(*std::max_element(l.begin(), l.end()) > *std::min_element(l.begin(), l.end()));

    struct Variant {
      const char* name;
      int threads, readers;
      std::size_t cache;
      int lookahead;
      bool resident;
    };
    const Variant variants[] = {
        {"readers 2, no cache", 2, 2, 0, 0, false},
        {"readers 2, cache", 2, 2, 100000, 0, false},
        {"readers 0, cache", 2, 0, 100000, 0, false},
        {"readers 2, cache, lookahead 1", 2, 2, 100000, 1, false},
        {"readers 2, cache, lookahead 2", 2, 2, 100000, 2, false},
        {"readers 2, cache, lookahead 8", 2, 2, 100000, 8, false},
        {"readers 2, cache 3, lookahead 8", 2, 2, 3, 8, false},
        {"1 thread, readers 1, cache 16, auto lookahead", 1, 1, 16, -1, false},
        {"1 thread, readers 0", 1, 0, 0, 0, false},
        {"resident", 2, 2, 0, 0, true},
    };
    for (const Variant& v : variants) {
      INFO(v.name);
      EngineOptions o = base_options(dir);
      o.threads = v.threads;
      o.reader_threads = v.readers;
      o.cache_records = v.cache;
      o.lookahead = v.lookahead;
      o.resident_experts = v.resident;
      ExpertSourceStats stats{};
      CHECK(bit_identical(reference, run_logits(o, nullptr, &stats)));
      // Every variant served the same demand requests (the reference's smallest arena may hit too:
      // how often depends on the cache policy, not on the requests).
      CHECK(stats.hits + stats.misses == sync_stats.hits + sync_stats.misses);
      if (v.resident) CHECK(stats.misses == 0);
    }
  }
}

TEST_CASE("acquire_next in reverse or shuffled landing order gives identical logits", "[compute][readahead]") {
  for (const char* preset : {"tiny", "tiny-k3"}) {
    INFO(preset);
    const auto dir = test::synth_container(preset);
    const Logits reference = run_logits(base_options(dir));
    for (auto order : {ReorderingSource::Order::reverse, ReorderingSource::Order::shuffled}) {
      auto source = std::make_unique<ReorderingSource>(local_source(dir, LocalSourceOptions{false, false, 0, 0}),
                                                       order);
      ReorderingSource* raw = source.get();
      EngineOptions o = base_options(dir);
      auto engine = Engine::open(o, std::move(source));
      REQUIRE(engine);
      // Same feeding as run_logits, through this engine.
      const int vocab = (*engine)->config().vocab;
      Logits all;
      int token = 1;
      for (int step = 0; step < 32; ++step) {
        token = step < 16 ? (step * 37 + 5) % vocab
                          : int(std::max_element(all.back().begin(), all.back().end()) - all.back().begin());
        const int one[1] = {token};
        auto logits = (*engine)->eval(one);
        REQUIRE(logits);
        all.emplace_back(logits->begin(), logits->end());
      }
      CHECK(raw->requests_ == 32 * (*engine)->config().n_moe_layers());
      CHECK(raw->out_of_order_ > 0);  // the order really differed from selection order
      CHECK(bit_identical(reference, all));
    }
  }
}

TEST_CASE("A record whose codebook_id differs from the manifest's codebook_base is refused",
          "[compute][readahead]") {
  const auto dir = test::synth_container("tiny");
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  const auto& [layer, bank] = *info->manifest.banks.begin();
  auto source = std::make_unique<ReorderingSource>(local_source(dir, LocalSourceOptions{false, false, 0, 0}),
                                                   ReorderingSource::Order::reverse, 1);
  auto engine = Engine::open(base_options(dir), std::move(source));
  REQUIRE(engine);
  const int one[1] = {5};
  auto logits = (*engine)->eval(one);
  REQUIRE_FALSE(logits);
  // Reverse order: the first record handed out is the second selected expert.
  const std::string expected_suffix = " of layer " + std::to_string(layer) + ": record codebook_id " +
                                      std::to_string(bank.codebook_base + 1) +
                                      " differs from the manifest's codebook_base " +
                                      std::to_string(bank.codebook_base);
  const std::string& message = logits.error().message;
  INFO(message);
  CHECK(message.starts_with("token at position 0: expert "));
  CHECK(message.ends_with(expected_suffix));
  CHECK((*engine)->position() == 0);
}

TEST_CASE("Local source with readers hands out every requested record once, in any order",
          "[compute][readahead]") {
  const auto dir = test::synth_container("tiny");
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  const int layer = info->manifest.banks.begin()->first;
  const int n_experts = info->manifest.config.n_experts;
  for (std::size_t cache : {std::size_t(0), std::size_t(3), std::size_t(64)}) {
    INFO("cache " << cache);
    auto src = local_source(dir, LocalSourceOptions{false, true, cache, 2});
    CHECK(src->reader_threads() == 2);
    for (int round = 0; round < 3; ++round) {
      std::vector<int> ids;
      for (int e = 0; e < n_experts; e += 1 + round % 2) ids.push_back((e + round) % n_experts);
      REQUIRE(src->request_layer(layer, ids));
      std::vector<int> seen(ids.size(), 0);
      for (std::size_t i = 0; i < ids.size(); ++i) {
        auto ready = src->acquire_next(layer);
        REQUIRE(ready);
        REQUIRE(ready->index >= 0);
        REQUIRE(ready->index < int(ids.size()));
        ++seen[std::size_t(ready->index)];
        CHECK(ready->view.expert == ids[std::size_t(ready->index)]);
        CHECK(ready->view.layer == layer);
      }
      CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
      auto extra = src->acquire_next(layer);
      REQUIRE_FALSE(extra);
      CHECK(extra.error().message ==
            "acquire_next on layer " + std::to_string(layer) + ": no record left in the current request");
      src->release_layer(layer);
    }
    const ExpertSourceStats s = src->stats();
    CHECK(s.bytes_read == s.misses * info->geometry.record_bytes);
  }
}

TEST_CASE("Prefetched records become hits and are not counted as misses", "[compute][readahead]") {
  const auto dir = test::synth_container("tiny");
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  const int layer = info->manifest.banks.begin()->first;
  const std::uint64_t rec = info->geometry.record_bytes;
  auto src = local_source(dir, LocalSourceOptions{false, true, 8, 2});
  const int guess[3] = {1, 4, 6};
  src->prefetch(layer, guess);
  CHECK(src->stats().prefetch_issued == 3);
  CHECK(src->stats().misses == 0);
  const int chosen[2] = {4, 5};  // 4 was prefetched (landed or in flight), 5 was not
  REQUIRE(src->request_layer(layer, chosen));
  for (int i = 0; i < 2; ++i) {
    auto ready = src->acquire_next(layer);
    REQUIRE(ready);
    CHECK(ready->view.expert == chosen[ready->index]);
  }
  src->release_layer(layer);
  CHECK(src->stats().hits == 1);
  CHECK(src->stats().misses == 1);
  // Prefetch of what is already cached issues nothing; readers off => prefetch is dropped.
  src->prefetch(layer, guess);
  CHECK(src->stats().prefetch_issued == 3);
  auto sync = local_source(dir, LocalSourceOptions{false, true, 8, 0});
  sync->prefetch(layer, guess);
  CHECK(sync->stats().prefetch_issued == 0);
  CHECK(sync->stats().bytes_read == 0);
  // Every byte the reader source read: 3 prefetched + 1 demand miss (wait until all landed).
  REQUIRE(src->request_layer(layer, guess));
  for (int i = 0; i < 3; ++i) REQUIRE(src->acquire_next(layer));
  src->release_layer(layer);
  CHECK(src->stats().bytes_read == 4 * rec);
}

TEST_CASE("Local source rejects a reader thread count out of range", "[compute][readahead]") {
  const auto dir = test::synth_container("tiny");
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  auto bad = LocalExpertSource::open(*info, LocalSourceOptions{false, false, 0, 9});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "reader_threads 9 must be 0..8");
}

}  // namespace waste

// A pass that fails mid-way (an expert read error at the last MoE layer) has already advanced the
// recurrent state of the layers before it (KDA, CSA2 windows and compressed sources, the n-gram
// look-back) while position() stays put. The state is then marked broken: later feeds, batch
// feeds and session saves are refused with the first failure named, until reset() (after which the
// sequence computes the bits of a fresh engine again).
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "compute/api/engine.hpp"
#include "compute/session/session_file.hpp"
#include "local_expert_source.hpp"
#include "shared/container/container.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

// A synchronous local source that fails every acquire on `fail_layer` while armed.
class FailingSource final : public ExpertSource {
 public:
  explicit FailingSource(std::unique_ptr<LocalExpertSource> inner) : inner_(std::move(inner)) {}
  Status request(int layer, std::span<const int> experts) override { return inner_->request(layer, experts); }
  Result<ExpertView> acquire(int layer, int expert) override {
    if (armed && layer == fail_layer) return make_error(Errc::io, "injected read error at layer " + std::to_string(layer));
    return inner_->acquire(layer, expert);
  }
  Result<ReadyExpert> acquire_next(int layer) override {
    if (armed && layer == fail_layer) return make_error(Errc::io, "injected read error at layer " + std::to_string(layer));
    return inner_->acquire_next(layer);
  }
  void release_layer(int layer) override { inner_->release_layer(layer); }
  void prefetch(int layer, std::span<const int> experts) override { inner_->prefetch(layer, experts); }
  [[nodiscard]] ExpertSourceStats stats() const override { return inner_->stats(); }
  [[nodiscard]] bool direct_io() const override { return inner_->direct_io(); }
  bool armed = false;
  int fail_layer = -1;

 private:
  std::unique_ptr<LocalExpertSource> inner_;
};

EngineOptions options_for(const std::filesystem::path& dir) {
  EngineOptions o;
  o.model = dir;
  o.threads = 1;
  o.ctx_tokens = 64;
  o.prefill_chunk = 8;
  o.lookahead = 0;
  return o;
}

struct Opened {
  std::unique_ptr<Engine> engine;
  FailingSource* source = nullptr;  // owned by the engine
};

Opened open_failing(const std::filesystem::path& dir) {
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  auto local = LocalExpertSource::open(*info, LocalSourceOptions{false, false, 0, 0});
  REQUIRE(local);
  auto failing = std::make_unique<FailingSource>(std::move(*local));
  FailingSource* raw = failing.get();
  auto engine = Engine::open(options_for(dir), std::move(failing));
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return {std::move(*engine), raw};
}

std::vector<int> tokens_of(int n, int vocab, int salt) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + salt) % vocab);
  return t;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("A pass that fails mid-way breaks the sequence until reset", "[compute][broken]") {
  // tiny: KDA layers before the failing MoE layer; tiny-v41: CSA2 windows and sources, Engram off.
  for (const char* preset : {"tiny", "tiny-v41"}) {
    INFO(preset);
    const auto dir = test::synth_container(preset);
    Opened a = open_failing(dir);
    const ModelConfig& c = a.engine->config();
    int last_moe = -1;
    for (int L = 0; L < c.n_layers; ++L) {
      if (c.is_moe(L)) last_moe = L;
    }
    REQUIRE(last_moe > 0);
    a.source->fail_layer = last_moe;

    const auto prompt = tokens_of(9, c.vocab, 5);
    REQUIRE(a.engine->eval(prompt));
    REQUIRE(a.engine->position() == 9);

    // The decode step fails at the last MoE layer: the layers before it have moved the state on.
    a.source->armed = true;
    const int next[1] = {prompt[3]};
    auto failed = a.engine->eval(next);
    REQUIRE_FALSE(failed);
    CHECK(failed.error().message ==
          "token at position 9: injected read error at layer " +
              std::to_string(last_moe));
    CHECK(a.engine->position() == 9);
    a.source->armed = false;

    // Without the mark the step below would run on the half-advanced state and return wrong logits.
    const std::string why = "sequence state unusable: a pass at position 9 failed mid-way (injected read error at layer " +
                            std::to_string(last_moe) + "); reset the sequence or load a session";
    auto refused = a.engine->eval(next);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message == "eval: " + why);
    CHECK(a.engine->position() == 9);

    const auto session = std::filesystem::temp_directory_path() / ("waste-broken-" + std::string(preset) + ".session");
    std::filesystem::remove(session);
    Status saved = session::save(*a.engine, session);
    REQUIRE_FALSE(saved);
    CHECK(saved.error().message == "session " + session.string() + ": " + why);
    CHECK_FALSE(std::filesystem::exists(session));

    // reset(): usable again, and the same bits as an engine that never failed.
    a.engine->reset();
    Opened b = open_failing(dir);
    auto a1 = a.engine->eval(prompt);
    auto b1 = b.engine->eval(prompt);
    REQUIRE(a1);
    REQUIRE(b1);
    CHECK(same_bits(*a1, *b1));
    auto a2 = a.engine->eval(next);
    auto b2 = b.engine->eval(next);
    REQUIRE(a2);
    REQUIRE(b2);
    CHECK(same_bits(*a2, *b2));
  }
}

TEST_CASE("A batch pass that fails mid-way breaks its sequences, not the others", "[compute][broken]") {
  const auto dir = test::synth_container("tiny");
  Opened a = open_failing(dir);
  const ModelConfig& c = a.engine->config();
  int last_moe = -1;
  for (int L = 0; L < c.n_layers; ++L) {
    if (c.is_moe(L)) last_moe = L;
  }
  a.source->fail_layer = last_moe;
  auto s0 = a.engine->new_sequence();
  auto s1 = a.engine->new_sequence();
  auto s2 = a.engine->new_sequence();
  REQUIRE(s0);
  REQUIRE(s1);
  REQUIRE(s2);
  const auto p0 = tokens_of(5, c.vocab, 1), p1 = tokens_of(4, c.vocab, 2), p2 = tokens_of(3, c.vocab, 3);
  {
    const SequenceFeed feeds[3] = {{s0->get(), p0}, {s1->get(), p1}, {s2->get(), p2}};
    REQUIRE(a.engine->feed_batch(feeds));
  }
  // s0 and s1 share the failing pass; s2 sits it out.
  a.source->armed = true;
  const int t[1] = {7};
  {
    const SequenceFeed feeds[2] = {{s0->get(), t}, {s1->get(), t}};
    Status failed = a.engine->feed_batch(feeds);
    REQUIRE_FALSE(failed);
    CHECK(failed.error().message == "batch of 2 sequences: injected read error at layer " + std::to_string(last_moe));
  }
  a.source->armed = false;
  CHECK((*s0)->position() == 5);
  CHECK((*s1)->position() == 4);
  {
    // s2 first: the batch is refused before anything is fed, naming the broken feed.
    const SequenceFeed feeds[2] = {{s2->get(), t}, {s1->get(), t}};
    Status refused = a.engine->feed_batch(feeds);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message == "batch feed 1: sequence state unusable: a pass at position 4 failed mid-way "
                                     "(injected read error at layer " + std::to_string(last_moe) +
                                         "); reset the sequence or load a session");
    CHECK((*s2)->position() == 3);
  }
  // s2 was not in the failed pass: it goes on, with the bits of a sequence fed alone.
  {
    const SequenceFeed feeds[1] = {{s2->get(), t}};
    REQUIRE(a.engine->feed_batch(feeds));
    Opened b = open_failing(dir);
    auto alone = b.engine->new_sequence();
    REQUIRE(alone);
    const SequenceFeed first[1] = {{alone->get(), p2}};
    REQUIRE(b.engine->feed_batch(first));
    const SequenceFeed second[1] = {{alone->get(), t}};
    REQUIRE(b.engine->feed_batch(second));
    CHECK(same_bits((*s2)->logits(), (*alone)->logits()));
  }
  // A reset sequence takes part again.
  (*s1)->reset();
  const SequenceFeed feeds[1] = {{s1->get(), p1}};
  CHECK(a.engine->feed_batch(feeds));
}

}  // namespace waste

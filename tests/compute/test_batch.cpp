// Continuous batching (Engine::feed_batch, Forward::run_batch): sequences fed together get, bit for
// bit, the logits each gets fed alone, whether a pass mixes prompts with decode steps, a sequence
// joins late, or a long prompt spans several passes; a pass reads each distinct expert once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "compute/api/engine.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

std::vector<int> prompt_of(int n, int seed, int vocab) {
  std::vector<int> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 53 + seed * 97 + 11) % vocab);
  return p;
}

EngineOptions options_for(const std::filesystem::path& dir, int ctx = 128) {
  EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.ctx_tokens = ctx;
  o.prefill_chunk = 64;
  o.lookahead = 0;
  return o;
}

std::unique_ptr<Engine> open(const EngineOptions& o) {
  auto engine = Engine::open(o);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return std::move(*engine);
}

int argmax(std::span<const float> v) { return int(std::max_element(v.begin(), v.end()) - v.begin()); }

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One sequence alone: the prompt through eval(), then greedy decode steps; the logits after the
// prompt and after every step.
std::vector<std::vector<float>> alone(const std::filesystem::path& dir, const std::vector<int>& prompt, int steps) {
  auto engine = open(options_for(dir));
  std::vector<std::vector<float>> out;
  auto logits = engine->eval(prompt);
  REQUIRE(logits);
  out.emplace_back(logits->begin(), logits->end());
  for (int s = 0; s < steps; ++s) {
    const int next[1] = {argmax(engine->logits())};
    auto stepped = engine->eval(next);
    REQUIRE(stepped);
    out.emplace_back(stepped->begin(), stepped->end());
  }
  return out;
}

std::unique_ptr<EngineSequence> sequence(Engine& engine) {
  auto seq = engine.new_sequence();
  REQUIRE(seq);
  return std::move(*seq);
}

}  // namespace

TEST_CASE("Sequences fed as one batch get the bits each gets alone", "[compute][batch]") {
  constexpr int kSteps = 10;
  for (const char* preset : {"tiny", "tiny-k3", "kl-shaped", "tiny-glm"}) {
    INFO(preset);
    const auto dir = test::container_for(preset);
    auto engine = open(options_for(dir));
    const int vocab = engine->config().vocab;
    // Prompts of 7, 1, 20 and 3 tokens: one pass of 31 tokens mixing a single-token prompt
    // with chunks; the fourth sequence joins at decode step 4, next to three decode tokens.
    const std::vector<std::vector<int>> prompts = {prompt_of(7, 0, vocab), prompt_of(1, 1, vocab),
                                                   prompt_of(20, 2, vocab), prompt_of(3, 3, vocab)};
    std::vector<std::vector<std::vector<float>>> want;
    for (const auto& p : prompts) want.push_back(alone(dir, p, kSteps));

    std::vector<std::unique_ptr<EngineSequence>> seqs;
    for (int i = 0; i < 4; ++i) seqs.push_back(sequence(*engine));
    std::vector<int> fed_steps(4, -1);  // -1: prompt not fed yet
    constexpr int kJoin = 4;
    for (int round = 0; round <= kSteps + kJoin; ++round) {
      std::vector<SequenceFeed> feeds;
      std::vector<std::vector<int>> tokens(4);
      for (int i = 0; i < 4; ++i) {
        if (i == 3 && round < kJoin) continue;
        if (fed_steps[std::size_t(i)] >= kSteps) continue;
        if (fed_steps[std::size_t(i)] < 0) {
          tokens[std::size_t(i)] = prompts[std::size_t(i)];
        } else {
          tokens[std::size_t(i)] = {argmax(seqs[std::size_t(i)]->logits())};
        }
        feeds.push_back(SequenceFeed{seqs[std::size_t(i)].get(), tokens[std::size_t(i)]});
      }
      if (feeds.empty()) break;
      INFO("round " << round << ", " << feeds.size() << " sequences");
      REQUIRE(engine->feed_batch(feeds));
      for (int i = 0; i < 4; ++i) {
        if (tokens[std::size_t(i)].empty()) continue;
        const int at = ++fed_steps[std::size_t(i)];
        INFO("sequence " << i << " after " << at << " decode steps");
        CHECK(same_bits(seqs[std::size_t(i)]->logits(), want[std::size_t(i)][std::size_t(at)]));
      }
    }
    for (int i = 0; i < 4; ++i) CHECK(fed_steps[std::size_t(i)] == kSteps);
    CHECK(seqs[2]->position() == 20 + kSteps);
  }
}

TEST_CASE("One-token prompt pieces and decode steps batched together get the bits each gets alone",
          "[compute][batch]") {
  // Under the default per-token rule a prompt token's experts are multiplied by matrix products
  // and a decode step's by LUT (compute/forward/expert_batch.hpp): a one-token prompt said to be
  // one (FeedKind::prompt) and a decode step share a pass, and neither moves the other's bits,
  // however many tokens of the pass chose their experts.
  for (const char* preset : {"tiny-k3", "kl-shaped"}) {
    INFO(preset);
    const auto dir = test::container_for(preset);
    auto engine = open(options_for(dir));
    const int vocab = engine->config().vocab;
    const auto long_prompt = prompt_of(30, 7, vocab);
    const auto one = prompt_of(1, 8, vocab);
    // Alone: the long prompt then 3 decode steps; the one-token prompt as a prompt.
    auto solo = open(options_for(dir));
    std::vector<std::vector<float>> want_long;
    REQUIRE(solo->eval(long_prompt, {}, FeedKind::prompt));
    want_long.emplace_back(solo->logits().begin(), solo->logits().end());
    std::vector<int> steps;
    for (int s = 0; s < 3; ++s) {
      steps.push_back(argmax(solo->logits()));
      auto stepped = solo->eval(std::span<const int>(&steps.back(), 1), {}, FeedKind::decode);
      REQUIRE(stepped);
      want_long.emplace_back(stepped->begin(), stepped->end());
    }
    auto solo_one = open(options_for(dir));
    auto one_logits = solo_one->eval(one, {}, FeedKind::prompt);
    REQUIRE(one_logits);
    const std::vector<float> want_one(one_logits->begin(), one_logits->end());

    auto a = sequence(*engine);
    auto b = sequence(*engine);
    const SequenceFeed prompts[1] = {{a.get(), long_prompt, {}, FeedKind::prompt}};
    REQUIRE(engine->feed_batch(prompts));
    CHECK(same_bits(a->logits(), want_long[0]));
    // Step 1: a's decode step beside b's one-token prompt, then two more decode steps of a alone
    // and beside b's first decode step.
    const SequenceFeed mixed[2] = {{a.get(), std::span<const int>(&steps[0], 1), {}, FeedKind::decode},
                                   {b.get(), one, {}, FeedKind::prompt}};
    REQUIRE(engine->feed_batch(mixed));
    CHECK(same_bits(a->logits(), want_long[1]));
    CHECK(same_bits(b->logits(), want_one));
    const int b_next = argmax(b->logits());
    const SequenceFeed both[2] = {{b.get(), std::span<const int>(&b_next, 1), {}, FeedKind::prompt},
                                  {a.get(), std::span<const int>(&steps[1], 1), {}, FeedKind::decode}};
    REQUIRE(engine->feed_batch(both));
    CHECK(same_bits(a->logits(), want_long[2]));
    auto solo_two = open(options_for(dir));
    std::vector<int> two = one;
    two.push_back(b_next);
    auto two_logits = solo_two->eval(two, {}, FeedKind::prompt);
    REQUIRE(two_logits);
    CHECK(same_bits(b->logits(), *two_logits));
  }
}

TEST_CASE("A batch pass reads each distinct expert once for every sequence routed to it", "[compute][batch]") {
  const auto dir = test::container_for("kl-shaped");
  const int vocab = 512;
  std::uint64_t solo_misses = 0;
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(prompt_of(5, 10 + i, vocab));
  for (const auto& p : prompts) {
    auto e = open(options_for(dir));
    REQUIRE(e->eval(p));
    solo_misses += e->stats().misses;
  }
  auto engine = open(options_for(dir));
  std::vector<std::unique_ptr<EngineSequence>> seqs;
  std::vector<SequenceFeed> feeds;
  for (int i = 0; i < 4; ++i) {
    seqs.push_back(sequence(*engine));
    feeds.push_back(SequenceFeed{seqs.back().get(), prompts[std::size_t(i)]});
  }
  REQUIRE(engine->feed_batch(feeds));
  const ExpertSourceStats s = engine->stats();
  // No cache: the solo engines read each token's experts once per chunk of its own sequence;
  // the batch reads the union over all four sequences once per layer.
  CHECK(s.misses < solo_misses);
  CHECK(s.misses + s.hits <= std::uint64_t(32 * 3));  // at most every expert of the 3 MoE layers once
}

TEST_CASE("A prompt longer than one pass continues in the next, beside other sequences", "[compute][batch]") {
  const auto dir = test::container_for("tiny-k3");
  auto engine = open(options_for(dir));
  const int vocab = engine->config().vocab;
  const auto long_prompt = prompt_of(100, 5, vocab);
  const auto short_prompt = prompt_of(9, 6, vocab);
  const auto want_long = alone(dir, long_prompt, 0);
  const auto want_short = alone(dir, short_prompt, 0);
  auto a = sequence(*engine);
  auto b = sequence(*engine);
  const SequenceFeed feeds[2] = {{b.get(), short_prompt}, {a.get(), long_prompt}};
  REQUIRE(engine->feed_batch(feeds));  // passes of 9 + 55, then 45 of the long prompt
  CHECK(a->position() == 100);
  CHECK(b->position() == 9);
  CHECK(same_bits(a->logits(), want_long[0]));
  CHECK(same_bits(b->logits(), want_short[0]));
}

TEST_CASE("A pass of more decode tokens than LUT rows (80 of 64) beside a prompt gets the bits each gets alone",
          "[compute][batch]") {
  constexpr int kSeqs = 80;  // decode tokens in one pass: above kLutRows, so the MoE runs in groups
  for (const char* preset : {"tiny", "kl-shaped"}) {
    INFO(preset);
    const auto dir = test::container_for(preset);
    EngineOptions wide = options_for(dir, 48);
    wide.prefill_chunk = 512;
    auto engine = open(wide);
    auto single = open(options_for(dir, 48));  // chunk 64: every sequence fed alone
    const int vocab = engine->config().vocab;
    std::vector<std::unique_ptr<EngineSequence>> seqs, refs;
    std::vector<std::vector<int>> prompts;
    for (int i = 0; i <= kSeqs; ++i) {
      prompts.push_back(prompt_of(i == kSeqs ? 30 : 3, i, vocab));
      seqs.push_back(sequence(*engine));
      refs.push_back(sequence(*single));
    }
    // Every sequence's prompt but the last one's, alone in both engines.
    for (int i = 0; i < kSeqs; ++i) {
      for (Engine* e : {engine.get(), single.get()}) {
        EngineSequence* s = (e == engine.get() ? seqs : refs)[std::size_t(i)].get();
        REQUIRE(e->feed_batch(std::vector<SequenceFeed>{{s, prompts[std::size_t(i)], {}, FeedKind::prompt}}));
      }
    }
    // One pass: 80 decode steps and the 30-token prompt (110 tokens), against each fed alone.
    std::vector<std::vector<int>> next(kSeqs + 1);
    std::vector<SequenceFeed> feeds;
    for (int i = 0; i < kSeqs; ++i) {
      next[std::size_t(i)] = {argmax(seqs[std::size_t(i)]->logits())};
      feeds.push_back({seqs[std::size_t(i)].get(), next[std::size_t(i)], {}, FeedKind::decode});
    }
    feeds.push_back({seqs[kSeqs].get(), prompts[kSeqs], {}, FeedKind::prompt});
    REQUIRE(engine->feed_batch(feeds));
    for (int i = 0; i <= kSeqs; ++i) {
      INFO("sequence " << i);
      const bool prompt = i == kSeqs;
      REQUIRE(single->feed_batch(std::vector<SequenceFeed>{
          {refs[std::size_t(i)].get(), prompt ? prompts[std::size_t(i)] : next[std::size_t(i)], {},
           prompt ? FeedKind::prompt : FeedKind::decode}}));
      CHECK(same_bits(seqs[std::size_t(i)]->logits(), refs[std::size_t(i)]->logits()));
    }
  }
}

TEST_CASE("feed_batch checks every feed before feeding any", "[compute][batch]") {
  const auto dir = test::container_for("tiny");
  auto engine = open(options_for(dir, 16));
  const int vocab = engine->config().vocab;
  auto a = sequence(*engine);
  auto b = sequence(*engine);
  const std::vector<int> ok_tokens = {1, 2, 3};
  const std::vector<int> bad_id = {1, vocab};
  const std::vector<int> too_long(17, 1);

  const SequenceFeed twice[2] = {{a.get(), ok_tokens}, {a.get(), ok_tokens}};
  auto st = engine->feed_batch(twice);
  REQUIRE_FALSE(st);
  CHECK(st.error().message == "batch feed 1: the same sequence as batch feed 0");

  const SequenceFeed bad[2] = {{a.get(), ok_tokens}, {b.get(), bad_id}};
  st = engine->feed_batch(bad);
  REQUIRE_FALSE(st);
  CHECK(st.error().message ==
        "batch feed 1: token id " + std::to_string(vocab) + " at index 1 is out of range 0.." + std::to_string(vocab - 1));

  const SequenceFeed overflow[2] = {{a.get(), ok_tokens}, {b.get(), too_long}};
  st = engine->feed_batch(overflow);
  REQUIRE_FALSE(st);
  CHECK(st.error().message == "batch feed 1: 17 tokens at position 0 overflow a context of 16 tokens");

  const SequenceFeed empty[1] = {{a.get(), {}}};
  st = engine->feed_batch(empty);
  REQUIRE_FALSE(st);
  CHECK(st.error().message == "batch feed 0: no tokens to feed");

  // Nothing was fed by the refused calls.
  CHECK(a->position() == 0);
  CHECK(b->position() == 0);
  CHECK(a->logits().empty());
}

}  // namespace waste

// Engine API: the generation loop (§6.2) against eval() + the sampler replayed by hand, stop
// and eos handling, context limits, token range errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "compute/api/engine.hpp"
#include "compute/sampling/sampler.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

std::unique_ptr<Engine> open_tiny(int ctx = 64) {
  EngineOptions options;
  options.model = test::synth_container("tiny");
  options.threads = 2;
  options.ctx_tokens = ctx;
  auto engine = Engine::open(options);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return std::move(*engine);
}

const std::vector<int> kPrompt = {1, 17, 42, 99};

// What generate() must produce: feed the prompt, then sample from the last logits and feed.
std::vector<int> replay(Engine& engine, const SamplingParams& sampling, int n) {
  engine.reset();
  auto logits = engine.eval(kPrompt);
  REQUIRE(logits);
  Sampler sampler(sampling);
  std::vector<int> tokens;
  for (int i = 0; i < n; ++i) {
    const int next = sampler.sample(*logits);
    tokens.push_back(next);
    const int one[1] = {next};
    logits = engine.eval(one);
    REQUIRE(logits);
  }
  return tokens;
}

}  // namespace

TEST_CASE("Greedy generation is reproducible and follows the argmax of eval", "[compute][forward][engine]") {
  auto engine = open_tiny();
  GenerateParams params;
  params.max_tokens = 12;
  params.eos_token = -2;
  std::vector<TokenEvent> events;
  auto first = engine->generate(kPrompt, params, [&](const TokenEvent& e) {
    events.push_back(e);
    return true;
  });
  REQUIRE(first);
  CHECK(first->stop == StopReason::max_tokens);
  REQUIRE(first->tokens.size() == 12);
  CHECK(engine->position() == int(kPrompt.size()) + 12);  // every generated token is fed
  REQUIRE(events.size() == 12);
  for (int i = 0; i < 12; ++i) {
    CHECK(events[std::size_t(i)].step == i);
    CHECK(events[std::size_t(i)].token == first->tokens[std::size_t(i)]);
  }
  const ExpertSourceStats total = engine->stats();
  std::uint64_t step_misses = 0;
  for (const auto& e : events) step_misses += e.experts_missed;
  CHECK(step_misses > 0);
  CHECK(step_misses <= total.misses);

  engine->reset();
  CHECK(engine->position() == 0);
  auto second = engine->generate(kPrompt, params);
  REQUIRE(second);
  CHECK(second->tokens == first->tokens);
  CHECK(replay(*engine, SamplingParams{}, 12) == first->tokens);
}

TEST_CASE("Seeded sampling is reproducible and matches the sampler replayed by hand", "[compute][forward][engine]") {
  auto engine = open_tiny();
  GenerateParams params;
  params.max_tokens = 10;
  params.eos_token = -2;
  params.sampling = SamplingParams{0.9f, 0.95f, 40, 1234};
  auto first = engine->generate(kPrompt, params);
  REQUIRE(first);
  engine->reset();
  auto second = engine->generate(kPrompt, params);
  REQUIRE(second);
  REQUIRE(first->tokens.size() == 10);
  CHECK(second->tokens == first->tokens);
  CHECK(replay(*engine, params.sampling, 10) == first->tokens);
}

TEST_CASE("Generation stops after feeding a stop token or the eos token", "[compute][forward][engine]") {
  auto engine = open_tiny();
  GenerateParams params;
  params.max_tokens = 12;
  params.eos_token = -2;
  auto free_run = engine->generate(kPrompt, params);
  REQUIRE(free_run);
  REQUIRE(free_run->tokens.size() == 12);
  const int stop = free_run->tokens[5];
  const auto first_hit = std::find(free_run->tokens.begin(), free_run->tokens.end(), stop) - free_run->tokens.begin();

  engine->reset();
  params.stop_tokens = {stop};
  auto stopped = engine->generate(kPrompt, params);
  REQUIRE(stopped);
  CHECK(stopped->stop == StopReason::stop_token);
  CHECK(stopped->tokens == std::vector<int>(free_run->tokens.begin(), free_run->tokens.begin() + first_hit + 1));
  CHECK(engine->position() == int(kPrompt.size()) + int(first_hit) + 1);

  engine->reset();
  params.stop_tokens.clear();
  params.eos_token = stop;
  auto eos = engine->generate(kPrompt, params);
  REQUIRE(eos);
  CHECK(eos->stop == StopReason::eos);
  CHECK(eos->tokens.size() == std::size_t(first_hit) + 1);

  engine->reset();
  params.eos_token = -2;
  auto cancelled = engine->generate(kPrompt, params, [](const TokenEvent& e) { return e.step < 2; });
  REQUIRE(cancelled);
  CHECK(cancelled->stop == StopReason::cancelled);
  CHECK(cancelled->tokens.size() == 3);
}

TEST_CASE("Generation stops when the context is full", "[compute][forward][engine]") {
  auto engine = open_tiny(8);
  GenerateParams params;
  params.max_tokens = 16;
  params.eos_token = -2;
  auto result = engine->generate(kPrompt, params);
  REQUIRE(result);
  CHECK(result->stop == StopReason::context_full);
  CHECK(result->tokens.size() == 4);
  CHECK(engine->position() == 8);

  engine->reset();
  const std::vector<int> long_prompt(8, 3);
  auto refused = engine->generate(long_prompt, params);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::argument);
  CHECK(refused.error().message ==
        "prompt of 8 tokens at position 0 leaves no free position in a context of 8 tokens");
}

TEST_CASE("Out-of-range token ids are refused with the offending id and index", "[compute][forward][engine]") {
  auto engine = open_tiny();
  const int vocab = engine->config().vocab;
  const std::vector<int> prompt = {1, vocab, 2};
  auto refused = engine->generate(prompt, GenerateParams{});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::argument);
  CHECK(refused.error().message ==
        "token id " + std::to_string(vocab) + " at index 1 is out of range 0.." + std::to_string(vocab - 1));
  const int negative[1] = {-1};
  auto eval_refused = engine->eval(negative);
  REQUIRE_FALSE(eval_refused);
  CHECK(eval_refused.error().message == "token id -1 at index 0 is out of range 0.." + std::to_string(vocab - 1));
  CHECK(engine->position() == 0);  // nothing was fed
}

}  // namespace waste

// The batch scheduler must not change bits: requests decoded together (a long prompt prefilled
// in chunks beside decode steps, requests joining mid-way) give exactly the tokens
// Engine::generate gives each of them alone with the same seed, and the same tokens served one
// after another. Also: stop ids and stop texts, max_tokens 0, cancellation frees the slot,
// 429 past the queue, 503 once draining.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cli/serve/scheduler.hpp"
#include "tests/cli/cli_test_support.hpp"

namespace waste::serve {
namespace {

constexpr int kCtx = 512;

std::unique_ptr<Engine> open_tiny() {
  EngineOptions o;
  o.model = test::tokenizer_container();
  o.threads = 2;
  o.ctx_tokens = kCtx;
  o.lookahead = 0;
  auto engine = Engine::open(o);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return std::move(*engine);
}

Tokenizer tiny_tokenizer() {
  auto t = Tokenizer::load(test::tokenizer_container());
  REQUIRE(t);
  return std::move(*t);
}

struct Case {
  std::vector<int> prompt;
  SamplingParams sampling;
  int max_tokens;
};

std::vector<Case> cases(int vocab) {
  std::vector<Case> out;
  const int lengths[] = {150, 5, 1, 70};  // 150 and 70 span several passes beside decode steps
  const float temperatures[] = {0.8f, 0.0f, 1.1f, 0.6f};
  for (int c = 0; c < 4; ++c) {
    Case k;
    for (int i = 0; i < lengths[c]; ++i) k.prompt.push_back((i * 31 + c * 101 + 7) % vocab);
    k.sampling.temperature = temperatures[c];
    k.sampling.top_k = c == 3 ? 20 : 0;
    k.sampling.top_p = c == 0 ? 0.9f : 1.0f;
    k.sampling.seed = std::uint64_t(1000 + c);
    k.sampling.presence_penalty = c == 2 ? 0.5f : 0.0f;
    k.max_tokens = 20 + 3 * c;
    out.push_back(k);
  }
  return out;
}

std::vector<int> alone(Engine& engine, const Case& k) {
  engine.reset();
  GenerateParams p;
  p.max_tokens = k.max_tokens;
  p.sampling = k.sampling;
  p.eos_token = -2;
  auto r = engine.generate(k.prompt, p);
  REQUIRE(r);
  return r->tokens;
}

GenerationJob job_of(const Case& k) {
  GenerationJob j;
  j.prompt = k.prompt;
  j.sampling = k.sampling;
  j.max_tokens = k.max_tokens;
  j.top_logprobs = 0;  // the deltas then carry the token ids
  return j;
}

// Every token id the stream reports, until it finishes.
std::vector<int> tokens_of(RequestStream& stream) {
  std::vector<int> ids;
  for (bool finished = false; !finished;) {
    std::vector<Delta> deltas;
    finished = stream.take(deltas, std::chrono::milliseconds(200));
    for (const Delta& d : deltas) {
      if (d.logprob) ids.push_back(d.logprob->token);
    }
  }
  return ids;
}

}  // namespace

TEST_CASE("Batched requests get the tokens each gets alone, bit for bit", "[serve][scheduler]") {
  auto reference = open_tiny();
  const auto all = cases(reference->config().vocab);
  std::vector<std::vector<int>> expected;
  for (const Case& k : all) expected.push_back(alone(*reference, k));

  auto engine = open_tiny();
  const Tokenizer tokenizer = tiny_tokenizer();
  SECTION("four at once, one joining late") {
    Scheduler scheduler(*engine, tokenizer, {4, 16, 64});
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int c = 0; c < 3; ++c) {
      auto s = scheduler.submit(job_of(all[std::size_t(c)]));
      REQUIRE(s);
      streams.push_back(*s);
    }
    // The fourth joins once the others are decoding.
    std::vector<Delta> first;
    while (first.empty()) streams[1]->take(first, std::chrono::milliseconds(200));
    auto late = scheduler.submit(job_of(all[3]));
    REQUIRE(late);
    streams.push_back(*late);
    for (int c = 0; c < 4; ++c) {
      INFO("request " << c);
      // The wait for request 1's first token may have taken more than one: keep them all.
      std::vector<int> got;
      if (c == 1) {
        for (const Delta& d : first) {
          if (d.logprob) got.push_back(d.logprob->token);
        }
      }
      const std::vector<int> rest = tokens_of(*streams[std::size_t(c)]);
      got.insert(got.end(), rest.begin(), rest.end());
      CHECK(got == expected[std::size_t(c)]);
      CHECK(streams[std::size_t(c)]->finish_reason() == Finish::length);
      CHECK(streams[std::size_t(c)]->completion_tokens() == all[std::size_t(c)].max_tokens);
      CHECK(streams[std::size_t(c)]->prompt_tokens() == int(all[std::size_t(c)].prompt.size()));
    }
    CHECK(scheduler.counters().steps.load() > 0);
    CHECK(scheduler.in_flight() == 0);
  }
  SECTION("one after another (parallel 1)") {
    Scheduler scheduler(*engine, tokenizer, {1, 16, 64});
    for (int c = 0; c < 4; ++c) {
      auto s = scheduler.submit(job_of(all[std::size_t(c)]));
      REQUIRE(s);
      CHECK(tokens_of(**s) == expected[std::size_t(c)]);
    }
  }
}

TEST_CASE("Stop ids end a request without their text, stop texts are cut", "[serve][scheduler]") {
  auto reference = open_tiny();
  const Tokenizer tokenizer = tiny_tokenizer();
  Case k{tokenizer.encode("The quick brown fox"), SamplingParams{}, 12};
  const std::vector<int> greedy = alone(*reference, k);
  REQUIRE(greedy.size() == 12);

  auto engine = open_tiny();
  Scheduler scheduler(*engine, tokenizer, {2, 4, 64});
  GenerationJob j = job_of(k);
  j.stop_ids = {greedy[4]};
  auto s = scheduler.submit(j);
  REQUIRE(s);
  // The stop id is sampled at the first step it appears (it may appear before index 4).
  std::size_t first = 0;
  while (greedy[first] != greedy[4]) ++first;
  const std::vector<int> got = tokens_of(**s);
  CHECK(got == std::vector<int>(greedy.begin(), greedy.begin() + std::ptrdiff_t(first)));
  CHECK((*s)->finish_reason() == Finish::stop);
  CHECK((*s)->completion_tokens() == int(first) + 1);

  // A stop text: the streamed text is the greedy text up to (not including) the stop text.
  const std::string full = tokenizer.decode(greedy);
  const std::string stop = full.substr(full.size() / 2, 3);
  j = job_of(k);
  j.stop_texts = {stop};
  auto t = scheduler.submit(j);
  REQUIRE(t);
  std::string text;
  for (bool finished = false; !finished;) {
    std::vector<Delta> deltas;
    finished = (*t)->take(deltas, std::chrono::milliseconds(200));
    for (const Delta& d : deltas) text += d.text;
  }
  CHECK(text == full.substr(0, full.find(stop)));
  CHECK((*t)->finish_reason() == Finish::stop);

  j = job_of(k);
  j.max_tokens = 0;
  auto z = scheduler.submit(j);
  REQUIRE(z);
  CHECK(tokens_of(**z).empty());
  CHECK((*z)->finish_reason() == Finish::length);
}

TEST_CASE("Cancelling frees the slot, the queue bound gives 429, draining 503", "[serve][scheduler]") {
  auto engine = open_tiny();
  const Tokenizer tokenizer = tiny_tokenizer();
  Scheduler scheduler(*engine, tokenizer, {1, 1, 64});
  Case k{tokenizer.encode("Hello world"), SamplingParams{}, kCtx};
  auto running = scheduler.submit(job_of(k));
  REQUIRE(running);
  std::vector<Delta> some;
  while (some.empty()) (*running)->take(some, std::chrono::milliseconds(200));
  auto queued = scheduler.submit(job_of(k));  // waits: the one slot is busy
  REQUIRE(queued);
  auto refused = scheduler.submit(job_of(k));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().status == 429);
  CHECK(refused.error().message == "too many requests waiting (1); retry later");

  // Hazard: a client that left keeps its slot until max_tokens. Cancelled, the queued one runs.
  (*running)->cancel();
  tokens_of(**running);
  CHECK((*running)->finish_reason() == Finish::cancelled);
  std::vector<Delta> started;
  while (started.empty()) (*queued)->take(started, std::chrono::milliseconds(200));
  (*queued)->cancel();
  tokens_of(**queued);
  CHECK((*queued)->finish_reason() == Finish::cancelled);

  Case too_long{std::vector<int>(kCtx, 1), SamplingParams{}, 1};
  auto overflow = scheduler.submit(job_of(too_long));
  REQUIRE_FALSE(overflow);
  CHECK(overflow.error().status == 400);
  CHECK(overflow.error().message ==
        "the prompt has 512 tokens; the context holds 512 (prompt plus at least one generated token)");
  Case bad_id{{1, 1 << 30}, SamplingParams{}, 1};
  auto outside = scheduler.submit(job_of(bad_id));
  REQUIRE_FALSE(outside);
  CHECK(outside.error().message.rfind("prompt token id 1073741824 is outside the vocabulary of ", 0) == 0);

  scheduler.drain();
  auto late = scheduler.submit(job_of(k));
  REQUIRE_FALSE(late);
  CHECK(late.error().status == 503);
}

TEST_CASE("Admission: reserved places count toward the bound and are given back", "[serve][scheduler]") {
  auto engine = open_tiny();
  const Tokenizer tokenizer = tiny_tokenizer();
  Scheduler scheduler(*engine, tokenizer, {1, 1, 64});
  auto a = scheduler.reserve();
  auto b = scheduler.reserve();
  REQUIRE(a);
  REQUIRE(b);
  CHECK(scheduler.in_flight() == 2);
  auto c = scheduler.reserve();  // parallel 1 + queue 1 already reserved: refused before any parsing
  REQUIRE_FALSE(c);
  CHECK(c.error().status == 429);
  CHECK(c.error().message == "too many requests waiting (1); retry later");
  CHECK_FALSE(scheduler.submit(job_of(Case{tokenizer.encode("Hi"), SamplingParams{}, 2})));
  { Admission dropped = std::move(*b); }  // a request refused after admission gives its place back
  CHECK(scheduler.in_flight() == 1);
  // A refused submit gives its ticket's place back too.
  Case bad_id{{1, 1 << 30}, SamplingParams{}, 1};
  CHECK_FALSE(scheduler.submit(job_of(bad_id), std::move(*a)));
  CHECK(scheduler.in_flight() == 0);
  auto d = scheduler.reserve();
  REQUIRE(d);
  auto stream = scheduler.submit(job_of(Case{tokenizer.encode("Hi"), SamplingParams{}, 2}), std::move(*d));
  REQUIRE(stream);
  tokens_of(**stream);
  CHECK(scheduler.in_flight() == 0);
  scheduler.drain();
  auto late = scheduler.reserve();
  REQUIRE_FALSE(late);
  CHECK(late.error().status == 503);
}

TEST_CASE("logit_bias moves the sampled tokens, an id outside the vocabulary is refused", "[serve][scheduler]") {
  auto engine = open_tiny();
  const Tokenizer tokenizer = tiny_tokenizer();
  Scheduler scheduler(*engine, tokenizer, {2, 4, 64});
  Case k{tokenizer.encode("Hello world"), SamplingParams{}, 6};
  auto plain = scheduler.submit(job_of(k));
  REQUIRE(plain);
  const std::vector<int> greedy = tokens_of(**plain);
  REQUIRE_FALSE(greedy.empty());
  // +100 on a token greedy never picks first: every token is that one.
  const int forced = (greedy[0] + 1) % engine->config().vocab;
  GenerationJob pushed = job_of(k);
  pushed.logit_bias = {{forced, 100.0f}};
  auto biased = scheduler.submit(pushed);
  REQUIRE(biased);
  CHECK(tokens_of(**biased) == std::vector<int>(6, forced));
  // -100 on greedy's first token: the first token differs.
  GenerationJob banned = job_of(k);
  banned.logit_bias = {{greedy[0], -100.0f}};
  auto other = scheduler.submit(banned);
  REQUIRE(other);
  const std::vector<int> without = tokens_of(**other);
  REQUIRE_FALSE(without.empty());
  CHECK(without[0] != greedy[0]);

  GenerationJob outside = job_of(k);
  outside.logit_bias = {{engine->config().vocab, 1.0f}};
  auto refused = scheduler.submit(outside);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().param == "logit_bias");
  CHECK(refused.error().message == "logit_bias token id " + std::to_string(engine->config().vocab) +
                                       " is outside the vocabulary of " + std::to_string(engine->config().vocab));
}

}  // namespace waste::serve

namespace waste::serve {

TEST_CASE("A forced plan's tokens come out as they are, beside free sequences that keep their bits",
          "[serve][scheduler][tools]") {
  auto reference = open_tiny();
  const auto all = cases(reference->config().vocab);
  const std::vector<int> expected0 = alone(*reference, all[0]);
  const std::vector<int> expected3 = alone(*reference, all[3]);

  auto engine = open_tiny();
  const Tokenizer tokenizer = tiny_tokenizer();
  Scheduler scheduler(*engine, tokenizer, {3, 4, 64});
  auto plan = std::make_shared<ConstraintPlan>();
  plan->stages.push_back({tokenizer.encode("<|tool_call_begin|>"), nullptr, {}});
  plan->stages.push_back({tokenizer.encode("functions.f:0"), nullptr, {}});
  std::vector<int> forced = plan->stages[0].forced;
  forced.insert(forced.end(), plan->stages[1].forced.begin(), plan->stages[1].forced.end());
  GenerationJob constrained = job_of(all[1]);
  constrained.constraint = plan;
  constrained.max_tokens = 100;
  constrained.stop_ids = {forced[1]};  // hazard: a forced token is never taken for a stop id

  auto a = scheduler.submit(job_of(all[0]));
  auto b = scheduler.submit(std::move(constrained));
  auto c = scheduler.submit(job_of(all[3]));
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  CHECK(tokens_of(**b) == forced);
  CHECK((*b)->finish_reason() == Finish::stop);  // the plan is complete
  CHECK((*b)->completion_tokens() == int(forced.size()));
  CHECK(tokens_of(**a) == expected0);
  CHECK(tokens_of(**c) == expected3);
}

}  // namespace waste::serve

// The prefix cache of `waste serve`: the pool (LRU by bytes, its bound, the longest-prefix
// lookup, eviction), the keys (SipHash-2-4 against the reference vectors, media positions keyed
// by their image), and the scheduler resuming a growing conversation from it with the tokens
// Engine::generate gives each turn from scratch, bit for bit (greedy and seeded sampling,
// after eviction, two conversations batched together), on a Kimi-Linear-shaped synthetic
// container (KDA + MLA) and on kjv-mini (models/kjv-mini, converted here).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cli/serve/metrics.hpp"
#include "cli/serve/openai_response.hpp"
#include "cli/serve/prefix_cache.hpp"
#include "cli/serve/scheduler.hpp"
#include "compute/session/session_file.hpp"
#include "tests/cli/cli_test_support.hpp"
#include "tests/compute/test_forward_fixtures.hpp"

namespace waste::serve {
namespace {

PrefixSnapshot snapshot(PrefixKey key, std::size_t state_bytes) {
  return PrefixSnapshot{std::move(key), std::vector<std::byte>(state_bytes, std::byte{7})};
}

PrefixKey key_of(std::initializer_list<int> ids) {
  PrefixKey key;
  for (int id : ids) key.push_back(token_key(id));
  return key;
}

}  // namespace

TEST_CASE("Prefix cache pool: longest held prefix, at most max_length, never a non-prefix", "[serve][prefix]") {
  PrefixCache pool(1 << 20);
  REQUIRE(pool.insert(snapshot(key_of({1, 2}), 10)));
  REQUIRE(pool.insert(snapshot(key_of({1, 2, 3, 4}), 10)));
  REQUIRE(pool.insert(snapshot(key_of({1, 2, 9, 9, 9}), 10)));
  REQUIRE(pool.insert(snapshot(key_of({5}), 10)));
  const PrefixKey request = key_of({1, 2, 3, 4, 5, 6});
  auto hit = pool.find(request, 100);
  REQUIRE(hit);
  CHECK(hit->key == key_of({1, 2, 3, 4}));
  hit = pool.find(request, 3);  // {1,2,3,4} is too long: the next longest prefix
  REQUIRE(hit);
  CHECK(hit->key == key_of({1, 2}));
  CHECK_FALSE(pool.find(request, 1));
  CHECK_FALSE(pool.find(key_of({2, 1, 3}), 100));
  CHECK_FALSE(pool.find(key_of({1}), 100));  // every held key is longer than the request or differs
  CHECK(pool.find(key_of({5, 5}), 100)->key == key_of({5}));
  CHECK(pool.touch(key_of({1, 2, 9, 9, 9})));
  CHECK_FALSE(pool.touch(key_of({1, 2, 9})));
  CHECK(pool.entries() == 4);
}

TEST_CASE("Prefix cache pool: bytes counted, least recently used dropped first, bound kept", "[serve][prefix]") {
  // Each snapshot counts its state bytes plus 8 per key position.
  const PrefixSnapshot probe = snapshot(key_of({1, 2, 3}), 100);
  CHECK(probe.bytes() == 100 + 3 * 8);

  PrefixCache pool(400);
  REQUIRE(pool.insert(snapshot(key_of({1}), 92)));     // 100
  REQUIRE(pool.insert(snapshot(key_of({2}), 92)));     // 100
  REQUIRE(pool.insert(snapshot(key_of({3}), 92)));     // 100
  CHECK(pool.bytes() == 300);
  CHECK(pool.find(key_of({1, 7}), 10));                // {1} is now the most recently used
  REQUIRE(pool.insert(snapshot(key_of({4, 4}), 184))); // 200: drops {2}, the least recently used
  CHECK(pool.bytes() == 400);
  CHECK(pool.evictions() == 1);
  CHECK_FALSE(pool.touch(key_of({2})));
  CHECK(pool.touch(key_of({3})));                      // {3} now more recent than {1}
  REQUIRE(pool.insert(snapshot(key_of({5}), 92)));     // drops {1}
  CHECK(pool.evictions() == 2);
  CHECK_FALSE(pool.touch(key_of({1})));
  CHECK(pool.bytes() == 400);

  SECTION("a snapshot larger than the pool is refused and drops nothing") {
    CHECK_FALSE(pool.insert(snapshot(key_of({9}), 393)));
    CHECK(pool.entries() == 3);
    CHECK(pool.bytes() == 400);
    CHECK(pool.evictions() == 2);
  }
  SECTION("an equal key replaces the held one") {
    REQUIRE(pool.insert(snapshot(key_of({5}), 42)));  // 50 instead of 100
    CHECK(pool.entries() == 3);
    CHECK(pool.bytes() == 350);
    CHECK(pool.find(key_of({5, 1}), 5)->state.size() == 42);
  }
  SECTION("an empty key or a zero-sized pool holds nothing") {
    CHECK_FALSE(pool.insert(snapshot({}, 1)));
    PrefixCache off(0);
    CHECK_FALSE(off.insert(snapshot(key_of({1}), 0)));
    CHECK(off.entries() == 0);
    CHECK_FALSE(off.find(key_of({1, 2}), 5));
  }
}

TEST_CASE("Prefix cache pool: random inserts and lookups never pass the bound", "[serve][prefix]") {
  std::mt19937 rng(5);
  PrefixCache pool(10'000);
  std::uint64_t inserted = 0;
  for (int i = 0; i < 2000; ++i) {
    PrefixKey key;
    const int n = 1 + int(rng() % 12);
    for (int j = 0; j < n; ++j) key.push_back(token_key(int(rng() % 3)));
    if (rng() % 3 == 0) {
      if (auto hit = pool.find(key, key.size())) {
        REQUIRE(hit->key.size() <= key.size());
        REQUIRE(std::equal(hit->key.begin(), hit->key.end(), key.begin()));
      }
    } else if (pool.insert(snapshot(key, rng() % 3000))) {
      ++inserted;
    }
    REQUIRE(pool.bytes() <= pool.capacity());
  }
  CHECK(inserted > 100);
  CHECK(pool.evictions() > 0);
}

TEST_CASE("SipHash-2-4 gives the reference vectors, media keys follow the image", "[serve][prefix]") {
  // The SipHash paper's key 00..0f; messages 00..(n-1).
  std::uint64_t k0 = 0, k1 = 0;
  for (int i = 0; i < 8; ++i) {
    k0 |= std::uint64_t(i) << (8 * i);
    k1 |= std::uint64_t(i + 8) << (8 * i);
  }
  std::vector<std::uint8_t> message;
  CHECK(siphash24(message, k0, k1) == 0x726fdb47dd0e0e31ULL);
  for (int i = 0; i < 15; ++i) message.push_back(std::uint8_t(i));
  CHECK(siphash24(message, k0, k1) == 0xa129ca6149be45e5ULL);

  const std::vector<std::uint8_t> a{1, 2, 3, 4}, b{1, 2, 3, 5};
  CHECK(image_digest(a) == image_digest(a));
  CHECK(image_digest(a) != image_digest(b));
  CHECK(media_key(image_digest(a), 0) != media_key(image_digest(b), 0));
  CHECK(media_key(image_digest(a), 0) != media_key(image_digest(a), 1));
  CHECK((media_key(17, 3) >> 63) == 1);
  CHECK((token_key(163605) >> 63) == 0);

  // A job's key: token ids, and its images' positions by digest (the same pad ids, two images).
  GenerationJob one, two;
  one.prompt = two.prompt = {10, 11, 99, 99, 99, 12};
  one.images.push_back({2, {}, "image", image_digest(a)});
  two.images.push_back({2, {}, "image", image_digest(b)});
  one.images[0].patches.grid = two.images[0].patches.grid = vision::PatchGrid{6, 2};  // 3 pads
  const PrefixKey ka = prefix_key(one), kb = prefix_key(two);
  REQUIRE(ka.size() == 6);
  CHECK(ka[0] == token_key(10));
  CHECK(ka[5] == token_key(12));
  const int pads = one.images[0].positions();
  REQUIRE(pads == 3);
  for (int p = 0; p < pads; ++p) CHECK(ka[2 + std::size_t(p)] == media_key(image_digest(a), std::size_t(p)));
  CHECK(std::mismatch(ka.begin(), ka.end(), kb.begin()).first - ka.begin() == 2);
}

TEST_CASE("usage.prompt_tokens_details.cached_tokens is added to a reply's usage", "[serve][prefix]") {
  const nlohmann::json usage = with_cached_tokens(nlohmann::json{{"usage", usage_json(40, 3)}}, 32);
  CHECK(usage.dump() ==
        R"({"usage":{"completion_tokens":3,"prompt_tokens":40,"prompt_tokens_details":{"cached_tokens":32},"total_tokens":43}})");
  CHECK(with_cached_tokens(nlohmann::json{{"id", 1}}, 5).dump() == R"({"id":1})");
}

namespace {

constexpr int kCtx = 512;
constexpr int kChunk = 16;

std::unique_ptr<Engine> open_model(const std::filesystem::path& dir) {
  EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.ctx_tokens = kCtx;
  o.lookahead = 0;
  o.prefill_chunk = kChunk;
  auto engine = Engine::open(o);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return std::move(*engine);
}

// kjv-mini converted once per process (convert's defaults: VQ3R experts, Q4G trunk).
const std::filesystem::path& kjv_mini() {
  static test::ScratchDir dir;
  static std::filesystem::path model;
  if (model.empty()) {
    const std::filesystem::path out = dir.path() / "kjv.waste";
    const test::Ran ran = test::run_waste({"convert", WASTE_SOURCE_DIR "/models/kjv-mini", "--out", out.string(), "--quiet"});
    INFO(ran.err);
    REQUIRE(ran.rc == 0);
    model = out;
  }
  return model;
}

struct Turn {
  std::vector<int> prompt;
  SamplingParams sampling;
  int max_tokens = 0;
};

std::vector<int> alone(Engine& engine, const Turn& t) {
  engine.reset();
  GenerateParams p;
  p.max_tokens = t.max_tokens;
  p.sampling = t.sampling;
  p.eos_token = -2;
  auto r = engine.generate(t.prompt, p);
  REQUIRE(r);
  return r->tokens;
}

std::shared_ptr<RequestStream> submit(Scheduler& scheduler, const Turn& t) {
  GenerationJob j;
  j.prompt = t.prompt;
  j.sampling = t.sampling;
  j.max_tokens = t.max_tokens;
  j.top_logprobs = 0;  // the deltas carry the token ids
  auto s = scheduler.submit(std::move(j));
  REQUIRE(s);
  return *s;
}

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

// Turn k of conversation `c`: the previous prompt, the previous answer as it was fed (all but its
// last token), then new tokens; odd turns greedy, even ones seeded sampling.
Turn next_turn(const Turn* previous, const std::vector<int>& answer, int c, int k, int vocab) {
  Turn t;
  if (previous) {
    t.prompt = previous->prompt;
    t.prompt.insert(t.prompt.end(), answer.begin(), answer.end() - 1);
  }
  const int fresh = 21 + 7 * k;
  for (int i = 0; i < fresh; ++i) t.prompt.push_back((i * 37 + k * 11 + c * 101 + 5) % vocab);
  t.sampling.temperature = k % 2 == 0 ? 0.0f : 0.8f;
  t.sampling.seed = std::uint64_t(100 * c + k);
  t.max_tokens = 6 + k;
  return t;
}

// What the stored end snapshot of a turn covers: its prompt and its answer but the last token.
std::size_t end_length(const Turn& t) { return t.prompt.size() + std::size_t(t.max_tokens) - 1; }

// Where the next turn resumes: the previous turn's end snapshot when decode steps give a
// prefill's bits (the LUT path alone), else (the default per-token rule: prompt tokens by matrix
// products, decode steps by LUT) the previous prompt's end, the answer being prefilled again so
// that the resumed state is the one a fresh prefill reaches, byte for byte.
std::size_t resumed_length(const Engine& engine, const Turn& previous) {
  return engine.decode_matches_prompt() ? end_length(previous) : previous.prompt.size();
}

// The bytes one snapshot at `position` takes (state plus key).
std::uint64_t snapshot_bytes(const Engine& engine, int position) {
  auto state = model::RunState::create(engine.config(), kCtx);
  REQUIRE(state);
  state->set_position(position);
  return session::session_bytes(engine.config(), session::make_header(engine.config(), *state)) +
         std::uint64_t(position) * sizeof(std::uint64_t);
}

void growing_conversations(const std::filesystem::path& model, const Tokenizer& tokenizer) {
  auto reference = open_model(model);
  const int vocab = reference->config().vocab;
  auto engine = open_model(model);

  SECTION("one conversation of four turns, then a regenerated turn: each resumes where the last left") {
    Scheduler scheduler(*engine, tokenizer, {2, 8, kChunk, std::uint64_t(64) << 20});
    std::vector<Turn> turns;
    std::vector<int> answer;
    std::uint64_t cached_total = 0;
    for (int k = 0; k < 4; ++k) {
      turns.push_back(next_turn(k ? &turns.back() : nullptr, answer, 0, k, vocab));
      const Turn& t = turns.back();
      INFO("turn " << k << ", " << t.prompt.size() << " prompt tokens");
      const std::vector<int> expected = alone(*reference, t);
      auto stream = submit(scheduler, t);
      answer = tokens_of(*stream);
      CHECK(answer == expected);
      REQUIRE(answer.size() == std::size_t(t.max_tokens));
      const int cached = k == 0 ? 0 : int(resumed_length(*engine, turns[turns.size() - 2]));
      CHECK(stream->cached_tokens() == cached);
      CHECK(stream->prompt_tokens() == int(t.prompt.size()));
      cached_total += std::uint64_t(cached);
    }
    // The last prompt again with another seed: from its own snapshot at the last multiple of the
    // chunk before its last token.
    Turn again = turns.back();
    again.sampling.temperature = 0.9f;
    again.sampling.seed = 4242;
    const std::size_t boundary = (again.prompt.size() - 1) / kChunk * kChunk;
    REQUIRE(boundary > end_length(turns[2]));
    auto stream = submit(scheduler, again);
    CHECK(tokens_of(*stream) == alone(*reference, again));
    CHECK(stream->cached_tokens() == int(boundary));
    cached_total += boundary;
    const SchedulerCounters& c = scheduler.counters();
    CHECK(c.cached_tokens.load() == cached_total);
    CHECK(c.prefix_hits.load() == 4);
    CHECK(c.prefix_misses.load() == 1);
    CHECK(c.prefix_evictions.load() == 0);
    CHECK(c.prefix_bytes.load() <= scheduler.options().prefix_cache_bytes);
    // /metrics says the same.
    Metrics metrics;
    const std::string text = metrics.render(&scheduler);
    CHECK(text.find("waste_prompt_cached_tokens_total " + std::to_string(cached_total) + "\n") != std::string::npos);
    CHECK(text.find("waste_prefix_cache_bytes " + std::to_string(c.prefix_bytes.load()) + "\n") != std::string::npos);
    CHECK(text.find("waste_prefix_cache_lookups_total{result=\"hit\"} 4\n") != std::string::npos);
    CHECK(text.find("waste_prefix_cache_capacity_bytes 67108864\n") != std::string::npos);
  }

  SECTION("a pool of two snapshots: evicted prefixes are fed again, the tokens do not change") {
    const std::uint64_t capacity = 2 * snapshot_bytes(*engine, 200);
    Scheduler scheduler(*engine, tokenizer, {1, 8, kChunk, capacity});
    std::vector<Turn> turns;
    std::vector<int> answer;
    for (int k = 0; k < 4; ++k) {
      turns.push_back(next_turn(k ? &turns.back() : nullptr, answer, 1, k, vocab));
      INFO("turn " << k);
      auto stream = submit(scheduler, turns.back());
      answer = tokens_of(*stream);
      CHECK(answer == alone(*reference, turns.back()));
      CHECK(scheduler.counters().prefix_bytes.load() <= capacity);
    }
    CHECK(scheduler.counters().prefix_evictions.load() > 0);
    // Turn 1 again: its snapshots (and turn 0's) were dropped for the later turns'.
    auto stream = submit(scheduler, turns[1]);
    CHECK(tokens_of(*stream) == alone(*reference, turns[1]));
    CHECK(stream->cached_tokens() == 0);
    CHECK(scheduler.counters().prefix_bytes.load() <= capacity);
  }

  SECTION("two conversations batched together, each restored into its own slot") {
    Scheduler scheduler(*engine, tokenizer, {2, 8, kChunk, std::uint64_t(64) << 20});
    std::vector<Turn> a, b;
    std::vector<int> answer_a, answer_b;
    for (int k = 0; k < 4; ++k) {
      a.push_back(next_turn(k ? &a.back() : nullptr, answer_a, 2, k, vocab));
      b.push_back(next_turn(k ? &b.back() : nullptr, answer_b, 3, k, vocab));
      INFO("turn " << k);
      auto sa = submit(scheduler, a.back());
      auto sb = submit(scheduler, b.back());
      answer_a = tokens_of(*sa);
      answer_b = tokens_of(*sb);
      CHECK(answer_a == alone(*reference, a.back()));
      CHECK(answer_b == alone(*reference, b.back()));
      CHECK(sa->cached_tokens() == (k == 0 ? 0 : int(resumed_length(*engine, a[a.size() - 2]))));
      CHECK(sb->cached_tokens() == (k == 0 ? 0 : int(resumed_length(*engine, b[b.size() - 2]))));
    }
  }

  SECTION("--prefix-cache 0: nothing is kept or reused") {
    Scheduler scheduler(*engine, tokenizer, {2, 8, kChunk, 0});
    Turn t = next_turn(nullptr, {}, 4, 0, vocab);
    for (int i = 0; i < 2; ++i) {
      auto stream = submit(scheduler, t);
      CHECK(tokens_of(*stream) == alone(*reference, t));
      CHECK(stream->cached_tokens() == 0);
    }
    CHECK(scheduler.counters().prefix_entries.load() == 0);
    CHECK(scheduler.counters().cached_tokens.load() == 0);
  }
}

}  // namespace

TEST_CASE("Prefix reuse gives the tokens of a fresh prefill, bit for bit, Kimi-Linear-shaped container",
          "[serve][prefix]") {
  auto tokenizer = Tokenizer::load(test::tokenizer_container());
  REQUIRE(tokenizer);
  growing_conversations(test::container_for("kl-shaped"), *tokenizer);
}

TEST_CASE("Prefix reuse gives the tokens of a fresh prefill, bit for bit, kjv-mini", "[serve][prefix]") {
  const std::filesystem::path& model = kjv_mini();
  auto tokenizer = Tokenizer::load(model);
  REQUIRE(tokenizer);
  growing_conversations(model, *tokenizer);
}

}  // namespace waste::serve

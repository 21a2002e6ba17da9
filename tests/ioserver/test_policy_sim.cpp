// The cache policy simulator (ioserver/bench/policy_sim) and the reuse policy: hand-counted
// hit counts, the default policy's bar on the committed real routing traces, prefetch admission.
// All deterministic replays: no disk, no timing.
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>

#include <catch2/catch.hpp>

#include "ioserver/expert_cache/expert_cache.hpp"
#include "ioserver/bench/policy_sim.hpp"
#include "ioserver/expert_cache/reuse_model.hpp"
#include "ioserver/expert_cache/routing_echo.hpp"
#include "test_support.hpp"

using namespace waste;

namespace {

// One MoE layer, one expert a token: A A B C B A C B A.
constexpr const char* kHandTrace =
    "{\"tok\": 0, \"layers\": [[0]]}\n{\"tok\": 1, \"layers\": [[0]]}\n{\"tok\": 2, \"layers\": [[1]]}\n"
    "{\"tok\": 3, \"layers\": [[2]]}\n{\"tok\": 4, \"layers\": [[1]]}\n{\"tok\": 5, \"layers\": [[0]]}\n"
    "{\"tok\": 6, \"layers\": [[2]]}\n{\"tok\": 7, \"layers\": [[1]]}\n{\"tok\": 8, \"layers\": [[0]]}\n";

RoutingTrace parse_or_fail(const std::string& text) {
  auto t = parse_routing_trace(text);
  INFO((t ? std::string() : t.error().message));
  REQUIRE(t);
  return *t;
}

RoutingTrace committed_trace(const char* name) {
  std::ifstream in(std::string(WASTE_SOURCE_DIR) + "/tests/data/" + name);
  std::ostringstream text;
  text << in.rdbuf();
  REQUIRE_FALSE(text.str().empty());
  return parse_or_fail(text.str());
}

}  // namespace

TEST_CASE("policy sim: LRU, LFRU and Belady hit counts on a hand-counted trace", "[ioserver][policy]") {
  const RoutingTrace trace = parse_or_fail(kHandTrace);
  REQUIRE(trace.n_layers == 1);
  REQUIRE(trace.top_k == 1);
  REQUIRE(trace.working_set() == 1);
  // Two slots. LRU: hits at access 2 (A) and 5 (B). LFRU keeps A (3 uses) against the one-use
  // B and C: hits at 2, 6, 9. Belady: 2, 5, 7, 9 (evicts A at 4, B at 6, C at 8).
  auto lru = simulate_policy(trace, 2, CachePolicy::lru);
  auto lfru = simulate_policy(trace, 2, CachePolicy::lfru);
  auto best = simulate_belady(trace, 2);
  REQUIRE(lru);
  REQUIRE(lfru);
  REQUIRE(best);
  CHECK(lru->demands == 9);
  CHECK(lru->hits == 2);
  CHECK(lfru->hits == 3);
  CHECK(best->hits == 4);
  CHECK(best->demands == 9);
}

TEST_CASE("policy sim: a layer's pinned experts never evict each other", "[ioserver][policy]") {
  // Two layers of two experts, three slots: the second expert of a layer may only evict the other
  // layer's records. Belady (which would otherwise evict the just-used record of this layer) and
  // every policy must keep the layer's first expert.
  const RoutingTrace trace = parse_or_fail(
      "{\"tok\": 0, \"layers\": [[0, 1], [0, 1]]}\n{\"tok\": 1, \"layers\": [[0, 2], [0, 1]]}\n");
  for (CachePolicy p : {CachePolicy::lru, CachePolicy::lfru, CachePolicy::reuse, CachePolicy::echo}) {
    auto r = simulate_policy(trace, 3, p);
    REQUIRE(r);
    CHECK(r->demands == 8);
  }
  auto best = simulate_belady(trace, 3);
  REQUIRE(best);
  // a b | x y(evicts b: next use never, a is used at 5) ; a(hit) c(evicts x or y... ) — by hand:
  // 1 a, 2 b, 3 x, 4 y evicts b (never used again; x is pinned), 5 a hit, 6 c evicts y (a pinned;
  // x next at 7, y at 8), 7 x hit, 8 y miss. Hits: 2.
  CHECK(best->hits == 2);
  auto too_small = simulate_policy(trace, 1, CachePolicy::reuse);
  REQUIRE_FALSE(too_small);
  CHECK(too_small.error().message == "capacity 1 is below one layer's 2 experts (they are pinned together)");
}

TEST_CASE("policy sim: malformed routing traces name the line", "[ioserver][policy]") {
  auto bad = parse_routing_trace("{\"tok\": 0, \"layers\": [[1, 2]]}\n{\"tok\": 1}\n");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "routing trace line 2: no \"layers\" array");
  auto uneven = parse_routing_trace("{\"layers\": [[1], [2]]}\n{\"layers\": [[1]]}\n");
  REQUIRE_FALSE(uneven);
  CHECK(uneven.error().message == "routing trace line 2: 1 layers where the first token has 2");
  auto negative = parse_routing_trace("{\"layers\": [[-1]]}\n");
  REQUIRE_FALSE(negative);
  CHECK(negative.error().message == "routing trace line 1: expert id -1 is not an integer in 0..16777215");
}

// The issue-15 bar on real routing (Kimi-Linear 300 tokens, OLMoE 299 tokens): the default is at
// least the best of LRU and LFRU at 0.5..8 working sets, keeps >= 20% at half a working set and
// closes half the gap to Belady at 0.5x and 1x (echo: 66% / 72% and 50.4% / 51.5%, LEARNED.md).
// reuse, the previous default, is held to what it closes (1x: 38-44%).
TEST_CASE("policy sim: the default policy beats LRU and LFRU on the committed real traces", "[ioserver][policy]") {
  REQUIRE(kDefaultCachePolicy == CachePolicy::echo);
  for (const char* name : {"routing-kimi-linear-300tok.jsonl", "routing-olmoe-299tok.jsonl"}) {
    const RoutingTrace trace = committed_trace(name);
    for (double multiple : {0.5, 1.0, 2.0, 4.0, 8.0}) {
      const auto capacity = std::uint32_t(multiple * trace.working_set());
      const auto lru = simulate_policy(trace, capacity, CachePolicy::lru);
      const auto lfru = simulate_policy(trace, capacity, CachePolicy::lfru);
      const auto def = simulate_policy(trace, capacity, kDefaultCachePolicy);
      const auto reuse = simulate_policy(trace, capacity, CachePolicy::reuse);
      const auto best = simulate_belady(trace, capacity);
      REQUIRE((lru && lfru && def && reuse && best));
      const double base = std::max(lru->hit_rate(), lfru->hit_rate());
      INFO(name << " at " << multiple << "x: lru " << lru->hit_rate() << " lfru " << lfru->hit_rate() << " reuse "
                << reuse->hit_rate() << " default " << def->hit_rate() << " belady " << best->hit_rate());
      CHECK(def->hit_rate() >= base);
      CHECK(reuse->hit_rate() >= base);
      CHECK(def->hit_rate() >= reuse->hit_rate());
      CHECK(best->hit_rate() >= def->hit_rate());
      if (multiple == 0.5) {
        CHECK(def->hit_rate() >= 0.20);
        CHECK(reuse->hit_rate() >= 0.20);
      }
      if (multiple <= 1.0) CHECK(def->hit_rate() - base >= 0.5 * (best->hit_rate() - base));
      if (multiple == 1.0) CHECK(reuse->hit_rate() - base >= 0.35 * (best->hit_rate() - base));
    }
  }
}

// Two clients on one cache, their walks half a pass apart (the trace's halves as their tokens).
// Before walks were told apart, every demand of the other client "started a token" (26 a pass on
// Kimi-Linear), the decay ran 26x too fast and echo kept 0.000 at 0.5x and 0.124 / 0.166 at 1x,
// below LFRU (LEARNED.md, session 7). The bar: at least the best of LRU and LFRU everywhere,
// >= 0.20 at 0.5x and 45% of the gap to Belady at 0.5x and 1x (measured: 68% / 65%, 48% / 56%).
TEST_CASE("policy sim: with two interleaved clients the default still beats LRU and LFRU", "[ioserver][policy]") {
  for (const char* name : {"routing-kimi-linear-300tok.jsonl", "routing-olmoe-299tok.jsonl"}) {
    const RoutingTrace trace = committed_trace(name);
    for (double multiple : {0.5, 1.0, 2.0, 4.0, 8.0}) {
      const auto capacity = std::uint32_t(multiple * trace.working_set());
      const auto lru = simulate_policy(trace, capacity, CachePolicy::lru, {}, 2);
      const auto lfru = simulate_policy(trace, capacity, CachePolicy::lfru, {}, 2);
      const auto def = simulate_policy(trace, capacity, kDefaultCachePolicy, {}, 2);
      const auto best = simulate_belady(trace, capacity, 2);
      REQUIRE((lru && lfru && def && best));
      CHECK(def->demands == std::uint64_t(trace.tokens.size() / 2 * 2) * trace.n_layers * std::uint64_t(trace.top_k));
      const double base = std::max(lru->hit_rate(), lfru->hit_rate());
      INFO(name << " at " << multiple << "x, 2 clients: lru " << lru->hit_rate() << " lfru " << lfru->hit_rate()
                << " default " << def->hit_rate() << " belady " << best->hit_rate());
      CHECK(def->hit_rate() >= base);
      CHECK(best->hit_rate() >= def->hit_rate());
      if (multiple == 0.5) CHECK(def->hit_rate() >= 0.20);
      if (multiple <= 1.0) CHECK(def->hit_rate() - base >= 0.45 * (best->hit_rate() - base));
    }
  }
}

TEST_CASE("policy sim: two clients' walks interleave one layer step at a time, half a pass apart",
          "[ioserver][policy]") {
  const RoutingTrace trace = parse_or_fail(
      "{\"layers\": [[0], [1], [2], [3]]}\n{\"layers\": [[0], [1], [2], [3]]}\n{\"layers\": [[0], [1], [2], [3]]}\n");
  // One client: the trace in order.
  const auto one = interleaved_walk(trace, 1);
  REQUIRE(one.size() == 12);
  for (std::size_t i = 0; i < one.size(); ++i) {
    CHECK(one[i].client == 0);
    CHECK(one[i].token == int(i / 4));
    CHECK(one[i].layer == int(i % 4));
  }
  // Two: token 0 for client 0, token 1 for client 1 (token 2 left over), client 1 two steps behind.
  std::string walk;
  for (const SimStep& s : interleaved_walk(trace, 2)) {
    walk += std::to_string(s.client) + ":" + std::to_string(s.token) + "." + std::to_string(s.layer) + " ";
  }
  CHECK(walk == "0:0.0 0:0.1 0:0.2 1:1.0 0:0.3 1:1.1 1:1.2 1:1.3 ");
  auto too_many = simulate_policy(trace, 4, CachePolicy::echo, {}, 4);
  REQUIRE_FALSE(too_many);
  CHECK(too_many.error().message == "a trace of 3 tokens cannot feed 4 clients");
}

TEST_CASE("reuse model: interleaved walks count one token per round and measure to the nearest walk",
          "[ioserver][policy]") {
  ReuseModel m(64);
  // Four layers; client 0 starts at layer 0, client 1 at layer 2, stepping together: 0,2 1,3 2,0 3,1 ...
  for (int step = 0; step < 12; ++step) {
    m.note_demand(step % 4, 0);
    m.note_demand((step + 2) % 4, 1);
  }
  // Client 0 walked 3 passes (2 restarts), client 1 restarted 3 times: the busiest walk's count.
  CHECK(m.walk_tokens(0) == 2);
  CHECK(m.walk_tokens(1) == 3);
  CHECK(m.epoch() == 3);
  CHECK(m.walk_layer(0) == 3);
  CHECK(m.walk_layer(1) == 1);
  // Layer 0 is one step from client 0 (at 3); layer 2 one step from client 1 (at 1); layer 3 is
  // client 0's own layer, two steps from client 1. A record used every round has p near 1.
  ReuseState every{float(1.0 / (1.0 - std::pow(2.0, -1.0 / ReuseModel::kHalfLifeTokens))), m.epoch()};
  CHECK(m.expected_wait(every, 0) == Approx(1.0));
  CHECK(m.expected_wait(every, 2) == Approx(1.0));
  CHECK(m.expected_wait(every, 3) == Approx(2.0));
  // One walk alone: its own layer is a whole pass away.
  ReuseModel alone(64);
  for (int step = 0; step < 8; ++step) alone.note_demand(step % 4, 0);
  CHECK(alone.epoch() == 1);
  const ReuseState every_alone{every.uses, alone.epoch()};
  CHECK(alone.expected_wait(every_alone, 3) == Approx(4.0));
  CHECK(alone.expected_wait(every_alone, 0) == Approx(1.0));
}

TEST_CASE("reuse and echo policies: a prefetch never evicts a record valued above the hint", "[ioserver][policy]") {
  // Under echo every past token read (1, 0) and only token 0 read (1, 1): the same ranking.
  for (const CachePolicy policy : {CachePolicy::reuse, CachePolicy::echo}) {
    INFO("policy " << (policy == CachePolicy::echo ? "echo" : "reuse"));
    constexpr std::uint32_t kSlots = 3;
    auto slots = std::make_unique<ipc::SlotShm[]>(kSlots);
    ExpertCache cache({slots.get(), kSlots}, policy);
    auto access = [&](int layer, int expert) {
      const auto got = cache.demand(ipc::make_key(layer, expert));
      if (got.outcome == ExpertCache::Outcome::claimed) cache.mark_ready(got.slot);
      return got.outcome;
    };
    // Token 0 also uses (1, 1) once; then (0, 0) and (1, 0) are used in each of 16 tokens.
    REQUIRE(access(0, 0) == ExpertCache::Outcome::claimed);
    REQUIRE(access(1, 0) == ExpertCache::Outcome::claimed);
    REQUIRE(access(1, 1) == ExpertCache::Outcome::claimed);
    for (int t = 1; t < 16; ++t) {
      REQUIRE(access(0, 0) == ExpertCache::Outcome::ready);
      REQUIRE(access(1, 0) == ExpertCache::Outcome::ready);
    }
    // Token 16 starts; the lookahead hints layer 1 while the walk is at layer 0.
    REQUIRE(access(0, 0) == ExpertCache::Outcome::ready);
    // The stale (1, 1) is worth less than a hint: the prefetch takes its slot.
    const auto first = cache.prefetch(ipc::make_key(1, 5));
    REQUIRE(first.outcome == ExpertCache::Outcome::claimed);
    cache.mark_ready(first.slot);
    CHECK_FALSE(cache.find(ipc::make_key(1, 1)));
    // Hazard: a speculative read evicting (0, 0) or (1, 0), used every token, for a guess. The
    // remaining candidates are those two and the first hint, valued as much as this one: declined,
    // nothing evicted.
    const std::uint64_t evictions = cache.evictions();
    const auto second = cache.prefetch(ipc::make_key(1, 6));
    CHECK(second.outcome == ExpertCache::Outcome::declined);
    CHECK(cache.evictions() == evictions);
    CHECK(cache.find(ipc::make_key(0, 0)));
    CHECK(cache.find(ipc::make_key(1, 0)));
    CHECK(cache.find(ipc::make_key(1, 5)));
    // Without admission the same prefetch evicts.
    cache.set_prefetch_admission(false);
    CHECK(cache.prefetch(ipc::make_key(1, 6)).outcome == ExpertCache::Outcome::claimed);
    // A demand is never declined: it evicts like any miss.
    cache.set_prefetch_admission(true);
    CHECK(access(0, 7) == ExpertCache::Outcome::claimed);
  }
}

TEST_CASE("a prefill chunk's next window, prefetched at its own layer, is never evicted by the rest of it",
          "[ioserver][policy]") {
  // moe_prefill pins a window of the layer's distinct experts and prefetches the next window
  // behind it: those hints are demanded before the walk leaves the layer, sooner than anything of
  // another layer. Seen under ASan in CI: a later hint of the same window evicted an earlier one
  // that had landed (reuse and echo valued a never-used record's wait as the longest), and the
  // chunk read that expert twice.
  for (const CachePolicy policy : {CachePolicy::lru, CachePolicy::lfru, CachePolicy::reuse, CachePolicy::echo}) {
    INFO("policy " << int(policy));
    constexpr std::uint32_t kSlots = 7;
    auto slots = std::make_unique<ipc::SlotShm[]>(kSlots);
    ExpertCache cache({slots.get(), kSlots}, policy);
    auto access = [&](int layer, int expert) {
      const auto got = cache.demand(ipc::make_key(layer, expert));
      if (got.outcome == ExpertCache::Outcome::claimed) cache.mark_ready(got.slot);
      return got;
    };
    // Eight tokens of decode over three layers: layers 0 and 2 read experts 0 and 1 every token;
    // layer 1 read expert 8 once, long ago.
    REQUIRE(access(1, 8).outcome == ExpertCache::Outcome::claimed);
    for (int t = 0; t < 8; ++t) {
      for (int layer : {0, 2}) {
        REQUIRE(access(layer, 0).outcome != ExpertCache::Outcome::no_victim);
        REQUIRE(access(layer, 1).outcome != ExpertCache::Outcome::no_victim);
      }
    }
    // A chunk: layer 0's window hits, then layer 1's first window (2 experts) is demanded and pinned.
    REQUIRE(access(0, 0).outcome == ExpertCache::Outcome::ready);
    std::vector<std::uint32_t> window;
    for (int e : {4, 5}) {
      const auto got = access(1, e);
      REQUIRE(got.outcome == ExpertCache::Outcome::claimed);
      cache.pin(got.slot, 0);
      window.push_back(got.slot);
    }
    // The next window (3 experts, one of them still cached) is prefetched behind it; each read
    // lands before the next is asked for.
    CHECK(cache.prefetch(ipc::make_key(1, 8)).outcome == ExpertCache::Outcome::ready);
    for (int e : {6, 7}) {
      const auto got = cache.prefetch(ipc::make_key(1, e));
      REQUIRE(got.outcome == ExpertCache::Outcome::claimed);
      cache.mark_ready(got.slot);
      CHECK(cache.find(ipc::make_key(1, 8)));   // the cached one stays,
      CHECK(cache.find(ipc::make_key(1, 6)));   // and so does the hint that landed first
    }
    for (std::uint32_t slot : window) cache.unpin(slot, 0);
    // The second window hits: each expert of the chunk read once.
    CHECK(access(1, 8).outcome == ExpertCache::Outcome::ready);
    CHECK(access(1, 6).outcome == ExpertCache::Outcome::ready);
    CHECK(access(1, 7).outcome == ExpertCache::Outcome::ready);
  }
}

TEST_CASE("routing echo: the best-matched past token and its successor vote", "[ioserver][policy]") {
  RoutingEcho echo(64);
  // Token 0 reads 1, 2; token 1 reads 3, 4; token 2 reads 5, 6; token 3 reads 1 (echoing token 0).
  CHECK_FALSE(echo.vote_this_token(1));  // no past yet
  echo.note_demand(1, 0);
  echo.note_demand(2, 0);
  echo.note_demand(3, 1);
  echo.note_demand(4, 1);
  echo.note_demand(5, 2);
  echo.note_demand(6, 2);
  echo.note_demand(1, 3);
  // Matches: token 0 has 1, tokens 1 and 2 none; the top 4 are 0, then 2 and 1 (ties to the most
  // recent). Token 0 read 2 (1 of the 3 voters); nobody read 9.
  REQUIRE(echo.vote_this_token(2));
  CHECK(*echo.vote_this_token(2) == 1.0 / 3.0);
  CHECK(*echo.vote_this_token(9) == 0.0);
  // Successors in the past: of 0 it is 1 (read 3, 4), of 1 it is 2 (read 5, 6); 2's successor is
  // the current token, so 2 voters.
  REQUIRE(echo.vote_next_token(3));
  CHECK(*echo.vote_next_token(3) == 0.5);
  CHECK(*echo.vote_next_token(5) == 0.5);
  CHECK(*echo.vote_next_token(1) == 0.0);
  // A second read of a record in the same token adds no match; a new match re-ranks.
  echo.note_demand(1, 3);
  echo.note_demand(5, 3);
  CHECK(*echo.vote_this_token(6) == 1.0 / 3.0);  // voters 2, 0 (a match each) and 1: only 2 read 6
  // The window forgets. Hazard: token kWindow reuses token 0's bit position; a stale bit would
  // make its first read of 7 look like a second one, and nothing would be ranked.
  RoutingEcho wrap(8);
  wrap.note_demand(7, 0);
  wrap.note_demand(9, RoutingEcho::kWindow - 1);
  wrap.note_demand(7, RoutingEcho::kWindow);
  REQUIRE(wrap.vote_this_token(9));
  CHECK(*wrap.vote_this_token(9) == 0.25);  // tokens kWindow-1..kWindow-4 vote, token 0 has left
}


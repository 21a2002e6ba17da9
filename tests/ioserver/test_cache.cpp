#include <map>
#include <random>
#include <thread>

#include <catch2/catch.hpp>

#include "compute/io/daemon_expert_source.hpp"
#include "ioserver/expert_cache/expert_cache.hpp"
#include "test_support.hpp"

using namespace waste;

namespace {

struct CacheFixture {
  explicit CacheFixture(std::uint32_t n, CachePolicy policy) : slots(new ipc::SlotShm[n]{}), cache({slots.get(), n}, policy) {}
  std::unique_ptr<ipc::SlotShm[]> slots;
  ExpertCache cache;

  // A demand access as the daemon does it: look up or claim, and complete the read at once.
  ExpertCache::Outcome access(int layer, int expert) {
    const auto l = cache.demand(ipc::make_key(layer, expert));
    if (l.outcome == ExpertCache::Outcome::claimed) cache.mark_ready(l.slot);
    return l.outcome;
  }
  bool resident(int layer, int expert) const { return cache.find(ipc::make_key(layer, expert)).has_value(); }
};

// A, A, A, B, C fill three slots; D must evict B under LFRU (lowest count, older than C)
// and A under LRU (oldest access).
void crafted_sequence(CacheFixture& f) {
  REQUIRE(f.access(1, 0) == ExpertCache::Outcome::claimed);  // A
  REQUIRE(f.access(1, 0) == ExpertCache::Outcome::ready);
  REQUIRE(f.access(1, 0) == ExpertCache::Outcome::ready);
  REQUIRE(f.access(1, 1) == ExpertCache::Outcome::claimed);  // B
  REQUIRE(f.access(1, 2) == ExpertCache::Outcome::claimed);  // C
  REQUIRE(f.access(1, 3) == ExpertCache::Outcome::claimed);  // D evicts one
}

}  // namespace

TEST_CASE("LFRU evicts the least frequently used record, ties to the least recent", "[ioserver][ipc]") {
  CacheFixture f(3, CachePolicy::lfru);
  crafted_sequence(f);
  REQUIRE(f.resident(1, 0));
  REQUIRE_FALSE(f.resident(1, 1));
  REQUIRE(f.resident(1, 2));
  REQUIRE(f.cache.evictions() == 1);
}

TEST_CASE("LRU evicts the least recently used record regardless of frequency", "[ioserver][ipc]") {
  CacheFixture f(3, CachePolicy::lru);
  crafted_sequence(f);
  REQUIRE_FALSE(f.resident(1, 0));
  REQUIRE(f.resident(1, 1));
  REQUIRE(f.resident(1, 2));
}

TEST_CASE("Pinned and in-flight slots are never evicted", "[ioserver][ipc]") {
  CacheFixture f(40, CachePolicy::lru);  // > 16 slots: the sampled path
  std::vector<std::uint32_t> pinned;
  for (int e = 0; e < 40; ++e) {
    const auto l = f.cache.demand(ipc::make_key(2, e));
    REQUIRE(l.outcome == ExpertCache::Outcome::claimed);
    if (e % 4 != 3) {
      f.cache.mark_ready(l.slot);
      if (e % 2 == 0) {
        f.cache.pin(l.slot, e % 5);
        pinned.push_back(l.slot);
      }
    }  // e % 4 == 3 stays in flight
  }
  // Only odd e with e % 4 == 1 are evictable: 10 of them. Ten more claims take exactly those.
  for (int i = 0; i < 10; ++i) {
    const auto l = f.cache.demand(ipc::make_key(3, i));
    REQUIRE(l.outcome == ExpertCache::Outcome::claimed);
    f.cache.mark_ready(l.slot);
    f.cache.pin(l.slot, 7);
  }
  for (std::uint32_t s : pinned) REQUIRE(ipc::key_layer(f.cache.key(s)) == 2);
  for (int e = 0; e < 40; ++e) {
    if (e % 4 == 3 || e % 2 == 0) REQUIRE(f.resident(2, e));
  }
  // Nothing is evictable now.
  REQUIRE(f.cache.demand(ipc::make_key(3, 99)).outcome == ExpertCache::Outcome::no_victim);
  // Unpinning one makes room for exactly that one.
  f.cache.unpin(pinned[0], 0);
  const auto l = f.cache.demand(ipc::make_key(3, 99));
  REQUIRE(l.outcome == ExpertCache::Outcome::claimed);
  REQUIRE(l.slot == pinned[0]);
}

TEST_CASE("The slot index finds, inserts and erases like a map under random churn", "[ioserver][ipc]") {
  SlotIndex index(100);
  std::map<std::uint32_t, std::uint32_t> oracle;
  std::mt19937 rng(42);
  for (int step = 0; step < 20000; ++step) {
    const std::uint32_t key = ipc::make_key(int(rng() % 4), int(rng() % 64));
    if (oracle.count(key)) {
      if (rng() % 2) {
        index.erase(key);
        oracle.erase(key);
      }
    } else if (oracle.size() < 100) {
      index.insert(key, std::uint32_t(step));
      oracle[key] = std::uint32_t(step);
    }
    const std::uint32_t probe = ipc::make_key(int(rng() % 4), int(rng() % 64));
    const auto found = index.find(probe);
    const auto it = oracle.find(probe);
    REQUIRE(found.has_value() == (it != oracle.end()));
    if (found) REQUIRE(*found == it->second);
  }
  REQUIRE(index.size() == oracle.size());
}

TEST_CASE("A record asked for by three clients at once is read from disk once", "[ioserver][ipc]") {
  auto reader = std::make_unique<test::PatternReader>(4, 16, 5000);
  test::PatternReader* probe = reader.get();
  probe->set_gate(true);
  auto server = IoServer::create(test::pattern_config("single-read", 8), std::move(reader));
  REQUIRE(server);
  std::vector<std::unique_ptr<DaemonExpertSource>> sources;
  for (int i = 0; i < 3; ++i) {
    auto lease = (*server)->attach(::getpid());
    REQUIRE(lease);
    auto source = DaemonExpertSource::open(*lease, ExpertGeometry{});
    REQUIRE(source);
    sources.push_back(std::move(*source));
  }
  const int id = 5;
  for (auto& s : sources) REQUIRE(s->request(2, std::span<const int>(&id, 1)));
  // The daemon has taken all three demands while the (gated) read is in progress.
  for (int i = 0; i < 2000 && (*server)->stats().misses < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE((*server)->stats().misses == 3);
  probe->set_gate(false);
  std::vector<std::thread> threads;
  std::vector<int> ok(3, 0);
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      auto bytes = sources[std::size_t(i)]->acquire_bytes(2, 5);
      ok[std::size_t(i)] = bytes && (*bytes)[0] == test::pattern_byte(2, 5, 0) &&
                           (*bytes)[4999] == test::pattern_byte(2, 5, 4999);
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(ok == std::vector<int>{1, 1, 1});
  REQUIRE(probe->reads_of(2, 5) == 1);
  const auto st = (*server)->stats();
  REQUIRE(st.reads == 1);
  REQUIRE(st.hits == 0);
  REQUIRE(st.slots_pinned == 1);
  for (auto& s : sources) s->release_layer(2);
  for (int i = 0; i < 2000 && (*server)->stats().slots_pinned != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE((*server)->stats().slots_pinned == 0);
}

TEST_CASE("Through the daemon, LFRU keeps the frequent record where LRU drops it", "[ioserver][ipc]") {
  for (auto policy : {CachePolicy::lfru, CachePolicy::lru}) {
    auto reader = std::make_unique<test::PatternReader>(2, 8, 4096);
    test::PatternReader* probe = reader.get();
    auto config = test::pattern_config("policy", 3);
    auto server = IoServer::create(config, std::move(reader));
    REQUIRE(server);
    REQUIRE((*server)->set_policy(policy));
    auto lease = (*server)->attach(::getpid());
    REQUIRE(lease);
    auto source = DaemonExpertSource::open(*lease, ExpertGeometry{});
    REQUIRE(source);
    for (int e : {0, 0, 0, 1, 2, 3, 0}) {
      REQUIRE((*source)->acquire_bytes(1, e));
      (*source)->release_layer(1);
    }
    // LFRU: A (expert 0) survived the eviction, so its 4th use is a hit. LRU: it was evicted.
    REQUIRE(probe->reads_of(1, 0) == (policy == CachePolicy::lfru ? 1 : 2));
    const auto st = (*source)->stats();
    REQUIRE(st.hits + st.misses == 7);
    REQUIRE((*server)->stats().hits == st.hits);
  }
}

// Router lookahead (waste-v0-reference.md §4.5): prefetching the next layer's predicted experts
// never changes logits, turns demand misses into hits when the cache can hold them, and the
// automatic width follows the cache-size rule of docs/design/forward.md.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "compute/api/engine.hpp"
#include "compute/forward/lookahead.hpp"
#include "shared/container/container.hpp"
#include "test_forward_fixtures.hpp"

namespace waste {
namespace {

struct Run {
  std::vector<std::vector<float>> logits;
  ExpertSourceStats stats;
  int lookahead = 0;
};

// 8 prompt tokens one by one, then 16 greedy decode steps.
Run run(const std::filesystem::path& dir, std::size_t cache, int lookahead) {
  EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.ctx_tokens = 64;
  o.cache_records = cache;
  o.reader_threads = 2;
  o.lookahead = lookahead;
  auto engine = Engine::open(o);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  Run r;
  r.lookahead = (*engine)->info().lookahead;
  int token = 3;
  for (int step = 0; step < 24; ++step) {
    if (step < 8) {
      token = (step * 29 + 3) % (*engine)->config().vocab;
    } else {
      const auto& last = r.logits.back();
      token = int(std::max_element(last.begin(), last.end()) - last.begin());
    }
    const int one[1] = {token};
    auto logits = (*engine)->eval(one);
    REQUIRE(logits);
    r.logits.emplace_back(logits->begin(), logits->end());
  }
  r.stats = (*engine)->stats();
  return r;
}

bool same_bits(const Run& a, const Run& b) {
  if (a.logits.size() != b.logits.size()) return false;
  for (std::size_t i = 0; i < a.logits.size(); ++i) {
    if (std::memcmp(a.logits[i].data(), b.logits[i].data(), a.logits[i].size() * sizeof(float)) != 0) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("Lookahead prefetch keeps logits bit-identical and turns misses into hits", "[compute][lookahead]") {
  for (const char* preset : {"tiny", "tiny-k3"}) {
    INFO(preset);
    const auto dir = test::synth_container(preset);
    auto info = ContainerInfo::open(dir);
    REQUIRE(info);
    const std::uint64_t rec = info->geometry.record_bytes;
    const Run off = run(dir, 100000, 0);
    CHECK(off.stats.prefetch_issued == 0);
    for (int n : {1, 3, 8}) {
      INFO("lookahead " << n);
      const Run on = run(dir, 100000, n);
      CHECK(on.lookahead == n);
      CHECK(same_bits(off, on));
      CHECK(on.stats.prefetch_issued > 0);
      // Same demand requests; with room for everything a prefetch can only add hits.
      CHECK(on.stats.hits + on.stats.misses == off.stats.hits + off.stats.misses);
      CHECK(on.stats.misses < off.stats.misses);
      // Speculative reads are bytes, not misses (some may still be in flight at the end).
      CHECK(on.stats.bytes_read >= on.stats.misses * rec);
      CHECK(on.stats.bytes_read <= (on.stats.misses + on.stats.prefetch_issued) * rec);
    }
    // A cache too small for one layer plus its prefetches: still the same bits.
    CHECK(same_bits(off, run(dir, 3, 8)));
  }
}

TEST_CASE("Automatic lookahead width follows the cache size", "[compute][lookahead]") {
  // Kimi-Linear shape: 26 MoE layers x top-8 = 208 records per token, 6656 records in all.
  CHECK(forward::auto_lookahead(0, 26, 8, 256, 2) == 0);      // no cache / unknown
  CHECK(forward::auto_lookahead(103, 26, 8, 256, 2) == 0);    // below half a working set
  CHECK(forward::auto_lookahead(104, 26, 8, 256, 2) == 1);    // half to one working set: half width
  CHECK(forward::auto_lookahead(104, 26, 8, 256, 16) == 3);
  CHECK(forward::auto_lookahead(208, 26, 8, 256, 2) == 2);    // one or more, small machine: narrow
  CHECK(forward::auto_lookahead(208, 26, 8, 256, 16) == 6);   // one or more, many cores: the reference's 6
  CHECK(forward::auto_lookahead(6655, 26, 8, 256, 16) == 6);
  CHECK(forward::auto_lookahead(6656, 26, 8, 256, 16) == 0);  // the whole model fits: nothing to predict
  // top_k below the cap caps the width; half of 2 is 1.
  CHECK(forward::auto_lookahead(20, 4, 2, 8, 16) == 2);
  CHECK(forward::auto_lookahead(4, 4, 2, 8, 16) == 1);
  CHECK(forward::auto_lookahead(3, 4, 2, 8, 16) == 0);

  // The engine asks its source: tiny has 3 MoE layers x top-2 = 6 records per token.
  const auto dir = test::synth_container("tiny");
  // cache_records 0: the in-process arena's minimum, 2 * top_k = 4 slots (half to one working set).
  CHECK(run(dir, 0, -1).lookahead == 1);
  CHECK(run(dir, 2, -1).lookahead == 0);
  CHECK(run(dir, 3, -1).lookahead == 1);
  CHECK(run(dir, 6, -1).lookahead == 2);
  // Without reader threads a prefetch could not overlap anything: automatic means off.
  EngineOptions o;
  o.model = dir;
  o.threads = 1;
  o.cache_records = 100;
  o.reader_threads = 0;
  auto sync = Engine::open(o);
  REQUIRE(sync);
  CHECK((*sync)->info().lookahead == 0);
  o.lookahead = 4;  // an explicit width is kept (prefetch is then dropped by the source)
  auto explicit_width = Engine::open(o);
  REQUIRE(explicit_width);
  CHECK((*explicit_width)->info().lookahead == 4);
}

}  // namespace waste

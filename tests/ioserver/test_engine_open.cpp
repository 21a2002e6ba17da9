// The one way an engine opens (compute/api/engine_open.hpp): the container's description is read
// once and handed to the memory plan, the attach and the engine; daemon and in-process branches
// give the same logits bit for bit; the bench's source hook sees the source the engine reads.
#include <unistd.h>

#include <cstring>
#include <vector>

#include <catch2/catch.hpp>

#include "compute/api/engine_open.hpp"
#include "compute/io/daemon_connect.hpp"
#include "shared/container/manifest_parses.hpp"
#include "test_control_support.hpp"
#include "test_support.hpp"

using namespace waste;

#ifdef WASTE_IOSERVER_BIN

namespace {

std::vector<float> prompt_logits(Engine& engine) {
  const std::vector<int> prompt{1, 17, 42, 99, 5, 7, 8};
  auto logits = engine.eval(prompt);
  REQUIRE(logits);
  return {logits->begin(), logits->end()};
}

OpenRequest request_for(const std::filesystem::path& model) {
  OpenRequest r;
  r.engine.model = model;
  r.engine.threads = 1;
  r.engine.ctx_tokens = 64;
  r.engine.lookahead = 0;
  return r;
}

}  // namespace

TEST_CASE("open_engine parses manifest.json once on either path and both branches give the same logits",
          "[ioserver][engine_open][oneplane]") {
  test::ScopedRuntimeDir runtime;
  ::setenv("WASTE_IOSERVER", WASTE_IOSERVER_BIN, 1);
  ::setenv("WASTE_LINGER_MS", "0", 1);
  const auto model = test::synth_container();

  // In-process first, while no daemon runs. One parse: the description, which the private
  // IoServer takes too (IoServer::create(config, info); ioserver/io_server_open.cpp).
  std::vector<float> in_process_logits;
  {
    OpenRequest r = request_for(model);
    r.in_process = true;
    r.cache_records = 5;
    int cache_calls = 0;
    r.on_cache = [&](const InProcessCache& c) {
      ++cache_calls;
      CHECK(c.records == 5);
      CHECK(c.budget_bytes == 0);
    };
    int wraps = 0;
    r.wrap_source = [&](std::unique_ptr<ExpertSource> s) {
      ++wraps;
      return s;
    };
    const std::uint64_t before = manifest_parses();
    auto opened = open_engine(r);
    if (!opened) FAIL(opened.error().message);
    CHECK(manifest_parses() - before == 1);
    CHECK(cache_calls == 1);
    CHECK(wraps == 1);
    CHECK_FALSE(opened->via_daemon);
    CHECK(opened->arena_slots == 5);
    CHECK((*opened)->daemon() == nullptr);
    CHECK((*opened)->container().files.dir == model);
    in_process_logits = prompt_logits(**opened);
  }

  // Through the daemon (started by this open): one parse before the first token, in this process.
  OpenRequest r = request_for(model);
  int cache_calls = 0;
  r.on_cache = [&](const InProcessCache&) { ++cache_calls; };
  const std::uint64_t before = manifest_parses();
  auto opened = open_engine(r);
  if (!opened) FAIL(opened.error().message);
  CHECK(manifest_parses() - before == 1);
  CHECK(cache_calls == 0);
  CHECK(opened->via_daemon);
  REQUIRE((*opened)->daemon() != nullptr);
  CHECK((*opened)->daemon()->spawned());
  CHECK_FALSE(opened->daemon_options_ignored);   // no --budget/--verify/--no-direct-io asked
  CHECK(opened->arena_slots == (*opened)->daemon()->daemon().arena_slots);
  CHECK(opened->budget_bytes == (*opened)->daemon()->daemon().budget_bytes);
  const std::vector<float> daemon_logits = prompt_logits(**opened);
  REQUIRE(daemon_logits.size() == in_process_logits.size());
  CHECK(std::memcmp(daemon_logits.data(), in_process_logits.data(), daemon_logits.size() * sizeof(float)) == 0);

  // A second open while that daemon serves: its budget wins, and the open says the asked one
  // did not apply. A description read by the caller is used as is: no parse at all.
  auto container = read_container(model);
  REQUIRE(container);
  OpenRequest second = request_for(model);
  second.budget = "1G";
  second.container = *container;
  const std::uint64_t before_second = manifest_parses();
  auto again = open_engine(second);
  if (!again) FAIL(again.error().message);
  CHECK(manifest_parses() - before_second == 0);
  CHECK_FALSE((*again)->daemon()->spawned());
  CHECK(again->daemon_options_ignored);
  CHECK(&(*again)->container() == container->get());
  ::unsetenv("WASTE_LINGER_MS");
}

#endif  // WASTE_IOSERVER_BIN

TEST_CASE("open_engine refuses bad options before reading or attaching anything", "[ioserver][engine_open]") {
  OpenRequest r;
  r.engine.model = "/nonexistent/none.waste";
  r.engine.ctx_tokens = 0;
  const std::uint64_t before = manifest_parses();
  auto refused = open_engine(r);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message == "ctx_tokens 0 must be at least 1");
  CHECK(manifest_parses() == before);
  r.engine.ctx_tokens = 64;
  auto missing = open_engine(r);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message ==
        "/nonexistent/none.waste does not exist (a model is a NAME.waste directory: make one with `waste synth` or "
        "`waste convert`)");
}

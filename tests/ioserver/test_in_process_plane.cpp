// One data plane: an engine opened without a daemon runs waste-ioserver's own IoServer in the
// process (private memory, compute/io/in_process_plane.hpp) and reads through
// DaemonExpertSource; its logits and greedy tokens are the daemon path's, bit for bit.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <filesystem>
#include <vector>

#include <catch2/catch.hpp>

#include "compute/api/engine.hpp"
#include "compute/io/daemon_connect.hpp"
#include "compute/io/in_process_plane.hpp"
#include "shared/ipc/runtime_dir.hpp"
#include "test_control_support.hpp"
#include "test_support.hpp"

using namespace waste;

#ifdef WASTE_IOSERVER_BIN

namespace {

struct Run {
  std::vector<std::vector<float>> logits;   // after the prompt, then after each generated token
  std::vector<int> tokens;
  ExpertSourceStats stats;
};

Run run(const EngineOptions& options) {
  auto engine = Engine::open(options);
  if (!engine) FAIL(engine.error().message);
  Run out;
  const std::vector<int> prompt{1, 17, 42, 99, 5, 7, 8};
  auto first = (*engine)->eval(prompt);
  REQUIRE(first);
  out.logits.emplace_back(first->begin(), first->end());
  int token = 0;
  for (int step = 0; step < 6; ++step) {
    const auto& last = out.logits.back();
    token = int(std::max_element(last.begin(), last.end()) - last.begin());  // greedy
    out.tokens.push_back(token);
    auto next = (*engine)->eval(std::span<const int>(&token, 1));
    REQUIRE(next);
    out.logits.emplace_back(next->begin(), next->end());
  }
  out.stats = (*engine)->stats();
  if (!options.daemon.enabled) {
    CHECK((*engine)->daemon() == nullptr);
    CHECK(ipc::list_daemon_infos().empty());  // no daemon behind the in-process engine
  }
  return out;
}

}  // namespace

TEST_CASE("In-process (the daemon's IoServer in this process) gives the daemon path's logits and tokens bit for bit",
          "[ioserver][inprocess][oneplane]") {
  test::ScopedRuntimeDir runtime;
  ::setenv("WASTE_IOSERVER", WASTE_IOSERVER_BIN, 1);
  ::setenv("WASTE_LINGER_MS", "0", 1);
  EngineOptions options;
  options.model = test::synth_container();
  options.threads = 1;
  options.ctx_tokens = 64;
  options.lookahead = 0;
  const auto cases = {std::size_t{0}, std::size_t{5}, std::size_t{1000}};  // smallest arena, tiny, everything
  std::vector<Run> in_process_runs;
  for (std::size_t records : cases) {  // first, while no daemon runs
    INFO("in-process arena " << records << " records");
    EngineOptions local = options;
    local.cache_records = records;
    in_process_runs.push_back(run(local));
  }
  EngineOptions daemon = options;
  daemon.daemon.enabled = true;
  const Run through_daemon = run(daemon);
  std::size_t k = 0;
  for (std::size_t records : cases) {
    INFO("in-process arena " << records << " records");
    const Run& in_process = in_process_runs[k++];
    CHECK(in_process.tokens == through_daemon.tokens);
    REQUIRE(in_process.logits.size() == through_daemon.logits.size());
    for (std::size_t i = 0; i < in_process.logits.size(); ++i) {
      INFO("logits " << i);
      REQUIRE(in_process.logits[i].size() == through_daemon.logits[i].size());
      CHECK(std::memcmp(in_process.logits[i].data(), through_daemon.logits[i].data(),
                        in_process.logits[i].size() * sizeof(float)) == 0);
    }
    // The same demands went through the same protocol.
    CHECK(in_process.stats.hits + in_process.stats.misses == through_daemon.stats.hits + through_daemon.stats.misses);
    CHECK(in_process.stats.misses > 0);
  }
  ::unsetenv("WASTE_LINGER_MS");
}

TEST_CASE("The in-process plane sizes its private arena from the options and names nothing in /dev/shm",
          "[ioserver][inprocess][oneplane]") {
  const auto dir = test::synth_container();
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  const ModelConfig& c = info->manifest.config;
  const std::uint64_t all = std::uint64_t(info->manifest.banks.size()) * std::uint64_t(c.n_experts);
  const auto in_shm = [] {
    std::size_t n = 0;
    const std::string prefix = "waste_" + std::to_string(::getuid()) + "_in-process-" + std::to_string(::getpid());
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) n += e.path().filename().string().starts_with(prefix);
    return n;
  };
  for (const auto& [asked, resident, slots] :
       {std::tuple{std::uint64_t{0}, false, std::uint64_t(2 * c.top_k)}, std::tuple{std::uint64_t{7}, false, std::uint64_t{7}},
        std::tuple{std::uint64_t{3}, true, all}}) {
    INFO("asked " << asked << (resident ? " resident" : ""));
    InProcessPlaneOptions o;
    o.arena_slots = asked;
    o.resident = resident;
    o.direct_io = false;
    auto plane = open_in_process_plane(dir, *info, o);
    if (!plane) FAIL(plane.error().message);
    CHECK(plane->arena_slots == slots);
    CHECK(plane->source->cache_capacity_records() == slots);
    REQUIRE(plane->trunk);
    CHECK(in_shm() == 0);
    const auto s = plane->source->stats();
    CHECK(s.hits + s.misses == 0);  // resident mode's warm-up is not counted
    // A record through the plane is the bank's bytes.
    const int layer = info->manifest.banks.begin()->first;
    const int id = 3;
    REQUIRE(plane->source->request_layer(layer, std::span<const int>(&id, 1)));
    auto view = plane->source->acquire(layer, 3);
    REQUIRE(view);
    CHECK(plane->source->stats().hits == (resident ? 1u : 0u));
    plane->source->release_layer(layer);
  }
  InProcessPlaneOptions bad;
  bad.reader_threads = 65;
  auto refused = open_in_process_plane(dir, *info, bad);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message == "in-process data plane: reader_threads must be 1..64, not 65");
}

#endif

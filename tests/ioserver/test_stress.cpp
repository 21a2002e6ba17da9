// Multi-process stress: 4 forked clients against one in-process daemon with a small arena.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <random>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "compute/io/daemon_expert_source.hpp"
#include "shared/ipc/segment_names.hpp"
#include "test_support.hpp"

using namespace waste;
using namespace std::chrono_literals;

namespace {

constexpr int kClients = 4;
constexpr int kExperts = 256;
constexpr int kMaxIds = 6;  // per layer request; 4 x 6 pins fit the arena with room to evict

struct ClientReport {
  std::uint64_t iterations = 0, hits = 0, misses = 0, mismatches = 0, errors = 0;
  char first_error[200] = {};
};

// Routing trace: per token, per layer, the selected expert ids (Kimi-Linear, 256 experts).
std::vector<std::vector<std::vector<int>>> load_trace() {
  std::vector<std::vector<std::vector<int>>> tokens;
  // The traces are committed under tests/data (see its README for provenance); WASTE_TEST_DATA overrides.
  const char* dir = std::getenv("WASTE_TEST_DATA");
  const std::string data = dir ? dir : std::string(WASTE_SOURCE_DIR) + "/tests/data";
  const std::string path = data + "/routing-kimi-linear-300tok.jsonl";
  std::ifstream in(path);
  if (!in) FAIL("routing trace missing: " + path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("layers")) continue;
    tokens.push_back(j["layers"].get<std::vector<std::vector<int>>>());
  }
  return tokens;
}

ClientReport run_client(int worker, const ClientLease& lease, const std::filesystem::path& dir,
                        std::uint64_t record_bytes, const std::vector<std::vector<std::vector<int>>>& trace,
                        std::chrono::steady_clock::time_point deadline) {
  ClientReport report;
  auto fail = [&](const std::string& what) {
    if (report.first_error[0] == '\0') std::snprintf(report.first_error, sizeof(report.first_error), "%s", what.c_str());
    ++report.errors;
  };
  auto source = DaemonExpertSource::open(lease, ExpertGeometry{});
  if (!source) {
    fail(source.error().message);
    return report;
  }
  // Oracle: every record, read once up front with plain preads.
  std::vector<std::vector<std::byte>> oracle(3 * kExperts);
  for (int l = 0; l < 3; ++l) {
    for (int e = 0; e < kExperts; ++e) oracle[std::size_t(l * kExperts + e)] = test::pread_record(dir, l + 1, e, record_bytes);
  }
  std::mt19937 rng(std::uint32_t(worker * 7919 + 1));
  const bool trace_driven = (worker % 2 == 1) && !trace.empty();
  std::size_t token = std::size_t(worker) * 37;
  while (std::chrono::steady_clock::now() < deadline) {
    for (int l = 0; l < 3; ++l) {
      const int layer = l + 1;  // MoE layers of the tiny model
      std::vector<int> ids;
      if (trace_driven) {
        const auto& layers = trace[token % trace.size()];
        for (int id : layers[std::size_t(l * 9 + worker) % layers.size()]) {
          if (ids.size() < kMaxIds && std::find(ids.begin(), ids.end(), id % kExperts) == ids.end()) ids.push_back(id % kExperts);
        }
      } else {
        // Skewed random: half the picks from a hot set of 16, so the cache has something to keep.
        while (ids.size() < kMaxIds) {
          const int id = (rng() % 2) ? int(rng() % 16) : int(rng() % kExperts);
          if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
        }
      }
      if (auto r = (*source)->request(layer, ids); !r) fail(r.error().message);
      std::vector<int> next(3);
      for (int& id : next) id = int(rng() % kExperts);
      (*source)->prefetch(layer % 3 + 1, next);
      for (int e : ids) {
        auto bytes = (*source)->acquire_bytes(layer, e);
        if (!bytes) {
          fail(bytes.error().message);
          continue;
        }
        const auto& want = oracle[std::size_t(l * kExperts + e)];
        if (want.size() != bytes->size() || std::memcmp(want.data(), bytes->data(), want.size()) != 0) ++report.mismatches;
      }
      (*source)->release_layer(layer);
    }
    ++token;
    ++report.iterations;
  }
  const auto st = (*source)->stats();
  report.hits = st.hits;
  report.misses = st.misses;
  return report;
}

void run_stress(std::chrono::seconds duration) {
  const auto dir = test::synth_container(kExperts);
  const auto trace = load_trace();
  REQUIRE(trace.size() == 300);  // a missing trace must fail, not silently drop the trace-driven clients
  const std::string instance = test::unique_instance("stress");
  std::uint64_t record_bytes = 0;
  {
    auto info = ContainerInfo::open(dir);
    REQUIRE(info);
    record_bytes = info->geometry.record_bytes;
  }
  // Fork first (no threads yet); each child waits for its lease on a pipe.
  std::vector<pid_t> children;
  std::vector<int> lease_pipes, report_pipes;
  for (int w = 0; w < kClients; ++w) {
    int to_child[2], from_child[2];
    REQUIRE(::pipe(to_child) == 0);
    REQUIRE(::pipe(from_child) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::int64_t buf[3];
      std::size_t got = 0;
      while (got < sizeof(buf)) {
        const ssize_t r = ::read(to_child[0], reinterpret_cast<char*>(buf) + got, sizeof(buf) - got);
        if (r <= 0) ::_exit(2);
        got += std::size_t(r);
      }
      ClientLease lease;
      lease.client_idx = int(buf[0]);
      lease.generation = std::uint64_t(buf[1]);
      lease.segment_name = ipc::arena_segment_name(instance);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(buf[2]);
      const ClientReport report = run_client(w, lease, dir, record_bytes, trace, deadline);
      const ssize_t n = ::write(from_child[1], &report, sizeof(report));
      ::_exit(n == ssize_t(sizeof(report)) ? 0 : 3);
    }
    children.push_back(pid);
    lease_pipes.push_back(to_child[1]);
    report_pipes.push_back(from_child[0]);
    ::close(to_child[0]);
    ::close(from_child[1]);
  }
  IoServerConfig config;
  config.container = dir;
  config.instance = instance;
  config.arena_slots = 40;  // 768 records: constant eviction
  config.reader_threads = 2;
  auto server = IoServer::create(config);
  REQUIRE(server);
  for (int w = 0; w < kClients; ++w) {
    auto lease = (*server)->attach(children[std::size_t(w)]);
    REQUIRE(lease);
    const std::int64_t buf[3] = {lease->client_idx, std::int64_t(lease->generation),
                                 std::int64_t(std::chrono::duration_cast<std::chrono::milliseconds>(duration).count())};
    REQUIRE(::write(lease_pipes[std::size_t(w)], buf, sizeof(buf)) == ssize_t(sizeof(buf)));
  }
  // Bounded wait: a deadlock shows up as a child that never reports.
  ClientReport total;
  for (int w = 0; w < kClients; ++w) {
    ClientReport report;
    std::size_t got = 0;
    const auto limit = std::chrono::steady_clock::now() + duration + 20s;
    while (got < sizeof(report) && std::chrono::steady_clock::now() < limit) {
      pollfd pfd{report_pipes[std::size_t(w)], POLLIN, 0};
      if (::poll(&pfd, 1, 200) <= 0) continue;
      const ssize_t r = ::read(report_pipes[std::size_t(w)], reinterpret_cast<char*>(&report) + got, sizeof(report) - got);
      if (r <= 0) break;
      got += std::size_t(r);
    }
    if (got != sizeof(report)) {
      for (pid_t p : children) ::kill(p, SIGKILL);
      for (pid_t p : children) ::waitpid(p, nullptr, 0);
      FAIL("client " << w << " did not finish (deadlock?)");
    }
    INFO("client " << w << ": " << report.iterations << " iterations, first error: " << report.first_error);
    CHECK(report.errors == 0);
    CHECK(report.mismatches == 0);
    CHECK(report.iterations > 0);
    total.hits += report.hits;
    total.misses += report.misses;
    total.iterations += report.iterations;
  }
  for (pid_t p : children) {
    int status = 0;
    REQUIRE(::waitpid(p, &status, 0) == p);
    REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  const auto st = (*server)->stats();
  // Every demand was answered exactly once, and counted the same on both sides.
  REQUIRE(st.hits == total.hits);
  REQUIRE(st.misses == total.misses);
  REQUIRE(st.hits > 0);
  REQUIRE(st.evictions > 0);
  REQUIRE(st.read_errors == 0);
  REQUIRE(st.reads <= st.misses + st.prefetch_reads);
  WARN("stress: " << total.iterations << " client iterations, " << st.hits << " hits, " << st.misses << " misses, "
                  << st.reads << " reads, " << st.evictions << " evictions");
}

}  // namespace

TEST_CASE("Four client processes see exact record bytes under eviction pressure", "[ioserver][ipc]") {
  run_stress(8s);
}

TEST_CASE("Four client processes for 30 s", "[ioserver][ipc][.stress]") { run_stress(30s); }

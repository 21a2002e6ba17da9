// "Arena full": a demand that finds every slot pinned waits for a slot to be freed (a
// release-layer, a dead client's reclaim) instead of failing at once; bounded, with an error
// naming the record and the slot counts; and at once when waiting can never help.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include <catch2/catch.hpp>

#include "compute/io/daemon_expert_source.hpp"
#include "shared/ipc/segment_names.hpp"
#include "test_support.hpp"

using namespace waste;
using test::eventually;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kRecordBytes = 8192;

struct PatternServer {
  std::unique_ptr<IoServer> server;
  explicit PatternServer(const std::string& what, std::chrono::milliseconds wait) {
    auto config = test::pattern_config(what, 2);  // two slots: one layer of two experts fills it
    config.arena_wait = wait;
    auto created = IoServer::create(config, std::make_unique<test::PatternReader>(4, 8, kRecordBytes));
    if (!created) FAIL(created.error().message);
    server = std::move(*created);
  }
  std::unique_ptr<DaemonExpertSource> client(int pid = ::getpid()) {
    auto lease = server->attach(pid);
    REQUIRE(lease);
    auto source = DaemonExpertSource::open(*lease, ExpertGeometry{});
    REQUIRE(source);
    return std::move(*source);
  }
};

bool holds_pattern(std::span<const std::byte> bytes, int layer, int expert) {
  if (bytes.size() != kRecordBytes) return false;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != test::pattern_byte(layer, expert, i)) return false;
  }
  return true;
}

// Client `a` pins both slots (layer 1, experts 0 and 1).
void pin_both(DaemonExpertSource& a) {
  const std::vector<int> ids = {0, 1};
  REQUIRE(a.request(1, ids));
  for (int e : ids) REQUIRE(a.acquire_bytes(1, e));
}

}  // namespace

TEST_CASE("A demand on a full arena waits for a release-layer and is then served", "[ioserver][ipc]") {
  PatternServer s("wait-release", 10s);
  auto a = s.client();
  auto b = s.client();
  pin_both(*a);
  // b's demand finds both slots pinned by a: it waits (b's own thread blocks in acquire).
  auto waiting = std::async(std::launch::async, [&] {
    auto bytes = b->acquire_bytes(2, 5);
    return bytes && holds_pattern(*bytes, 2, 5);
  });
  REQUIRE(eventually([&] { return s.server->stats().demands_waiting == 1; }, 2000ms));
  CHECK(waiting.wait_for(100ms) == std::future_status::timeout);  // still waiting, no error
  a->release_layer(1);
  REQUIRE(waiting.wait_for(5s) == std::future_status::ready);
  CHECK(waiting.get());
  const auto st = s.server->stats();
  CHECK(st.arena_waits == 1);
  CHECK(st.demands_waiting == 0);
}

TEST_CASE("A demand on a full arena fails after the bound, naming the record and the slot counts",
          "[ioserver][ipc]") {
  PatternServer s("wait-timeout", 300ms);
  auto a = s.client();
  auto b = s.client();
  pin_both(*a);
  const auto t0 = std::chrono::steady_clock::now();
  auto bytes = b->acquire_bytes(2, 5);
  const auto waited = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(bytes);
  const std::string& m = bytes.error().message;
  INFO(m);
  CHECK(m.rfind("expert 5 of layer 2: no arena slot was freed within ", 0) == 0);
  CHECK(m.find(" ms (arena 2 slots: 2 pinned, 0 of them by this client, 0 being read)") != std::string::npos);
  CHECK(waited >= 300ms);
  CHECK(waited < 3s);
  // The arena is usable again once a lets go.
  a->release_layer(1);
  b->release_layer(2);
  auto again = b->acquire_bytes(2, 5);
  REQUIRE(again);
  CHECK(holds_pattern(*again, 2, 5));
}

TEST_CASE("A client that pins every slot itself gets the arena-full error at once", "[ioserver][ipc]") {
  PatternServer s("wait-self", 10s);
  auto a = s.client();
  const std::vector<int> ids = {0, 1, 2};  // three records of one layer, two slots
  REQUIRE(a->request(1, ids));
  const auto t0 = std::chrono::steady_clock::now();
  auto third = a->acquire_bytes(1, 2);
  REQUIRE_FALSE(third);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);  // not the 10 s bound
  CHECK(third.error().message ==
        "expert 2 of layer 1: this client pins every arena slot itself, so none can be freed "
        "(arena 2 slots: 2 pinned, 2 of them by this client, 0 being read)");
  for (int e : {0, 1}) {
    auto bytes = a->acquire_bytes(1, e);
    REQUIRE(bytes);
    CHECK(holds_pattern(*bytes, 1, e));
  }
  CHECK(s.server->stats().arena_waits == 0);
}

TEST_CASE("A demand waiting on a full arena is served once a killed client's pins are reclaimed",
          "[ioserver][ipc]") {
  PatternServer s("wait-reclaim", 10s);
  int ready_pipe[2];
  REQUIRE(::pipe(ready_pipe) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ready_pipe[0]);
    for (;;) ::pause();  // the parent attaches on its behalf and pins through the lease below
  }
  ::close(ready_pipe[1]);
  ::close(ready_pipe[0]);
  // The child's pins: attach for the child's pid, pin from here through its lease (the daemon
  // only knows pins by client index, and reclaims the index when that pid dies).
  auto pinner = s.client(child);
  pin_both(*pinner);
  auto waiter = s.client();
  auto waiting = std::async(std::launch::async, [&] {
    auto bytes = waiter->acquire_bytes(3, 7);
    return bytes && holds_pattern(*bytes, 3, 7);
  });
  REQUIRE(eventually([&] { return s.server->stats().demands_waiting == 1; }, 2000ms));
  ::kill(child, SIGKILL);
  REQUIRE(waiting.wait_for(5s) == std::future_status::ready);
  CHECK(waiting.get());
  const auto st = s.server->stats();
  CHECK(st.clients_reclaimed == 1);
  CHECK(st.demands_waiting == 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
}

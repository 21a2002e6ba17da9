// The idle-time pre-fault of the arena (docs/design/daemon.md, "Arena pages"): it runs ahead of
// the claimed slots, is off with populate_arena = false, and never changes what clients read.
#include <unistd.h>

#include <chrono>
#include <thread>

#include <catch2/catch.hpp>

#include "compute/io/daemon_expert_source.hpp"
#include "test_support.hpp"

using namespace waste;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kRecordBytes = 3 * 4096 + 100;  // slots of 16 KiB

std::unique_ptr<IoServer> pattern_server(const std::string& what, bool populate) {
  auto config = test::pattern_config(what, 16);
  config.populate_arena = populate;
  auto server = IoServer::create(config, std::make_unique<test::PatternReader>(4, 8, kRecordBytes));
  if (!server) FAIL(server.error().message);
  return std::move(*server);
}

}  // namespace

TEST_CASE("The arena is pre-faulted ahead of use and the records read through it are exact", "[ioserver][ipc]") {
  auto server = pattern_server("populate", true);
  const std::uint64_t arena_bytes = 16 * 16384;  // far below the 1 GiB look-ahead: all of it
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (server->stats().arena_populated_bytes < arena_bytes && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  CHECK(server->stats().arena_populated_bytes == arena_bytes);
  auto lease = server->attach(::getpid());
  REQUIRE(lease);
  auto source = DaemonExpertSource::open(*lease, ExpertGeometry{});
  REQUIRE(source);
  const std::vector<int> ids = {0, 3, 7};
  REQUIRE((*source)->request(2, ids));
  for (int e : ids) {
    auto bytes = (*source)->acquire_bytes(2, e);
    REQUIRE(bytes);
    REQUIRE(bytes->size() == kRecordBytes);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < bytes->size(); ++i) wrong += (*bytes)[i] != test::pattern_byte(2, e, i);
    CHECK(wrong == 0);
  }
}

TEST_CASE("populate_arena = false leaves the arena to be faulted in by the reads", "[ioserver][ipc]") {
  auto server = pattern_server("nopopulate", false);
  std::this_thread::sleep_for(100ms);
  CHECK(server->stats().arena_populated_bytes == 0);
}

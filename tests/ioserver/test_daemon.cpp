// connect_or_spawn: the compute side finds (or starts) the container's shareable daemon.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>

#include <cstring>
#include <future>
#include <set>
#include <thread>

#include "compute/api/engine.hpp"
#include "compute/io/daemon_connect.hpp"
#include "compute/io/daemon_expert_source.hpp"
#include "compute/forward/int8_mode.hpp"
#include "compute/model/decode_head.hpp"
#include "shared/container/container.hpp"
#include "shared/ipc/control_client.hpp"
#include "shared/ipc/ioserver_launch.hpp"
#include "shared/ipc/segment_names.hpp"
#include "shared/memory/memory_plan.hpp"
#include "test_control_support.hpp"
#include "test_support.hpp"

using namespace waste;
namespace fs = std::filesystem;

#ifdef WASTE_IOSERVER_BIN

namespace {

struct DaemonEnv {
  test::ScopedRuntimeDir runtime;
  DaemonEnv() {
    ::setenv("WASTE_IOSERVER", WASTE_IOSERVER_BIN, 1);
    ::setenv("WASTE_LINGER_MS", "300", 1);
  }
  ~DaemonEnv() {
    ::unsetenv("WASTE_IOSERVER");
    ::unsetenv("WASTE_LINGER_MS");
  }
};

bool shm_exists(const std::string& name) { return fs::exists(fs::path("/dev/shm") / name); }

std::size_t attached(const ipc::DaemonInfo& d) {
  auto c = ipc::ControlClient::connect(d.socket);
  if (!c) return 0;
  auto s = c->stats();
  return s ? (*s)["clients"].size() : 0;
}

}  // namespace

TEST_CASE("commands share one auto-started daemon, it exits a linger after the last one leaves", "[ioserver][control]") {
  DaemonEnv env;
  test::TempDir t("spawn");
  const auto model = test::make_tiny_container(t.path);
  REQUIRE_FALSE(model.empty());
  const std::string instance = ipc::instance_for_container(model).value();

  auto refused = connect_or_spawn(model, /*allow_spawn=*/false);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message == "no waste-ioserver serves " + fs::canonical(model).string());

  int daemon_pid = 0;
  {
    auto first = std::make_unique<DaemonConnection>(connect_or_spawn(model, true).value());
    CHECK(first->spawned());
    daemon_pid = first->daemon().pid;
    CHECK(first->daemon().instance == instance);
    CHECK(first->lease().segment_name == ipc::arena_segment_name(instance));
    CHECK(first->lease().trunk_segment_name == ipc::trunk_segment_name(instance));
    CHECK(first->lease().daemon_pid == daemon_pid);
    auto second = connect_or_spawn(model, true);
    REQUIRE(second);
    CHECK_FALSE(second->spawned());
    CHECK(second->daemon().pid == daemon_pid);
    auto stats = ipc::ControlClient::connect(first->daemon().socket)->stats();
    REQUIRE(stats);
    REQUIRE((*stats)["clients"].size() == 2);
    // Each declared the container's per-client memory (state + scratch), admitted beside the
    // cache without --clients.
    CHECK((*stats)["clients"][0]["state_bytes"] == plan_memory(model)->client_bytes());
    CHECK(first->heartbeat_error().empty());
    // Hazard: the starter leaving must not end the other client's daemon.
    first.reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(900));   // three lingers
    REQUIRE(ipc::process_alive(daemon_pid));
    CHECK(attached(second->daemon()) == 1);
  }
  CHECK(ipc::wait_process_gone(daemon_pid, 10000));
  CHECK_FALSE(shm_exists(ipc::arena_segment_name(instance)));
  CHECK_FALSE(shm_exists(ipc::trunk_segment_name(instance)));
  for (const auto& entry : fs::directory_iterator(ipc::runtime_dir())) FAIL("left behind: " << entry.path());
}

TEST_CASE("a daemon stopped (SIGSTOP 3 s) mid-demand is waited for and the bytes arrive", "[ioserver][control]") {
  // Hazard: the client took a daemon whose heartbeat was 1.5 s late for a dead one, and stayed
  // broken. Alive but late (paging, a debugger, a starved VM) must only be slow.
  DaemonEnv env;
  test::TempDir t("sigstop");
  const auto model = test::make_tiny_container(t.path);
  REQUIRE_FALSE(model.empty());
  // No background fill: the demand below must find its record not resident (a resident one is
  // served from the arena without the daemon, so the stop would not be waited for).
  auto conn = connect_or_spawn(model, true, 0, {"--fill", "off"});
  REQUIRE(conn);
  const int daemon_pid = conn->daemon().pid;
  auto info = ContainerInfo::open(model);
  REQUIRE(info);
  const ExpertGeometry geometry = info->geometry;
  auto source = DaemonExpertSource::open(conn->lease(), geometry);
  REQUIRE(source);
  std::vector<int> moe;   // layers with an expert bank
  for (int l = 0; l < 64; ++l) {
    if (fs::exists(model / ("experts-L" + std::to_string(l) + ".bin"))) moe.push_back(l);
  }
  REQUIRE(moe.size() >= 2);
  REQUIRE((*source)->acquire_bytes(moe[0], 0));   // attached and served before the stop

  REQUIRE(::kill(daemon_pid, SIGSTOP) == 0);
  std::thread resume([daemon_pid] {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    ::kill(daemon_pid, SIGCONT);
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto bytes = (*source)->acquire_bytes(moe[1], 2);   // the demand waits through the stop
  const auto waited = std::chrono::steady_clock::now() - t0;
  resume.join();
  if (!bytes) FAIL(bytes.error().message);
  CHECK(waited >= std::chrono::milliseconds(2500));
  const auto oracle = test::pread_record(model, moe[1], 2, geometry.record_bytes);
  REQUIRE(oracle.size() == bytes->size());
  CHECK(std::memcmp(oracle.data(), bytes->data(), oracle.size()) == 0);
  // Not sticky: the next demand is served too.
  auto next = (*source)->acquire_bytes(moe[1], 1);
  if (!next) FAIL(next.error().message);
  const auto oracle2 = test::pread_record(model, moe[1], 1, geometry.record_bytes);
  CHECK(std::memcmp(oracle2.data(), next->data(), oracle2.size()) == 0);
}

TEST_CASE("an auto-started daemon holds none of its starter's descriptors", "[ioserver][control]") {
  // Hazard: a descriptor the command left open without O_CLOEXEC (a listening socket, a pipe
  // whose reader waits for EOF, a session file) lived on in the daemon, past the command.
  DaemonEnv env;
  test::TempDir t("fds");
  const auto model = test::make_tiny_container(t.path);
  REQUIRE_FALSE(model.empty());
  const fs::path marker = t.path / "inherited-marker";
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);   // no O_CLOEXEC
  REQUIRE(fd > 2);
  auto conn = connect_or_spawn(model, true);
  ::close(fd);
  REQUIRE(conn);
  REQUIRE(conn->spawned());
  const fs::path fds = fs::path("/proc") / std::to_string(conn->daemon().pid) / "fd";
  int seen = 0;
  for (const auto& entry : fs::directory_iterator(fds)) {
    std::error_code ec;
    const fs::path target = fs::read_symlink(entry.path(), ec);
    if (!ec) ++seen;
    CHECK(target != marker);
  }
  CHECK(seen >= 3);   // the listing itself worked: stdin, stdout, stderr at least
}

TEST_CASE("two commands starting at once end with one daemon, both attached", "[ioserver][control]") {
  DaemonEnv env;
  test::TempDir t("race");
  const auto model = test::make_tiny_container(t.path);
  REQUIRE_FALSE(model.empty());
  auto start = [&] { return connect_or_spawn(model, true); };
  auto a = std::async(std::launch::async, start);
  auto b = std::async(std::launch::async, start);
  auto ca = a.get();
  auto cb = b.get();
  REQUIRE(ca);
  REQUIRE(cb);
  CHECK(ca->daemon().pid == cb->daemon().pid);
  CHECK(int(ca->spawned()) + int(cb->spawned()) == 1);   // the loser found the winner's daemon
  CHECK(ca->lease().client_idx != cb->lease().client_idx);
  CHECK(attached(ca->daemon()) == 2);
  const int pid = ca->daemon().pid;
  ca = std::unexpected(Error{Errc::ipc, "done"});
  cb = std::unexpected(Error{Errc::ipc, "done"});
  CHECK(ipc::wait_process_gone(pid, 10000));
}

TEST_CASE("connect_or_spawn attaches to a waste-ctl style daemon, which stays until stopped", "[ioserver][control]") {
  DaemonEnv env;
  test::TempDir t("shared");
  const auto model = test::make_tiny_container(t.path);
  REQUIRE_FALSE(model.empty());
  REQUIRE(ipc::run_ioserver({model.string(), "--budget", "64M"}));
  auto served = ipc::find_daemon_for_model(model);
  REQUIRE(served);
  {
    auto first = connect_or_spawn(model, true, 1000);
    auto second = connect_or_spawn(model, true, 2000);
    REQUIRE(first);
    REQUIRE(second);
    CHECK_FALSE(first->spawned());
    CHECK(first->daemon().pid == served->pid);
    CHECK(first->lease().client_idx != second->lease().client_idx);
    auto stats = ipc::ControlClient::connect(served->socket)->stats();
    CHECK((*stats)["budget"]["clients_bytes"] == 3000);
  }
  auto after = ipc::ControlClient::connect(served->socket)->stats();
  REQUIRE(after);
  CHECK((*after)["clients"].empty());   // both detached on destruction
  std::this_thread::sleep_for(std::chrono::milliseconds(900));   // no auto-exit without --linger
  REQUIRE(ipc::process_alive(served->pid));
  REQUIRE(ipc::ControlClient::connect(served->socket)->shutdown(0));
  CHECK(ipc::wait_process_gone(served->pid, 5000));
}

TEST_CASE("an engine declares the state of every sequence it holds, at its context", "[ioserver][control]") {
  // Hazard: `waste serve --parallel 3` holding three sequences' state while the daemon budgets one.
  DaemonEnv env;
  test::TempDir t("sequences");
  const auto model = test::make_tiny_container(t.path);
  REQUIRE_FALSE(model.empty());
  EngineOptions o;
  o.model = model;
  o.threads = 1;
  o.ctx_tokens = 512;
  o.daemon.enabled = true;
  o.daemon.sequences = 3;
  auto engine = Engine::open(o);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  auto stats = ipc::ControlClient::connect((*engine)->daemon()->daemon().socket)->stats();
  REQUIRE(stats);
  REQUIRE((*stats)["clients"].size() == 1);
  const MemoryPlan plan = plan_memory(model, 512).value();
  // Beside them, the decode head's copy when this process makes one (compute/model/decode_head.hpp).
  const std::uint64_t head = model::decode_head_copy_bytes(ContainerInfo::open(model).value().manifest);
  CHECK(head == (forward::int8_decode_enabled() ? 256u * 98u : 0u));  // tiny: vocab 256, one group of 128
  CHECK((*stats)["clients"][0]["state_bytes"] == 3 * plan.state_bytes + plan.scratch_bytes + head);
  CHECK(plan.state_bytes != plan_memory(model).value().state_bytes);  // the context is what was declared

  o.daemon.sequences = 0;
  auto refused = Engine::open(o);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message == "daemon.sequences 0 must be 1 or more");
}

#endif

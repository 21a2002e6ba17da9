// Start-up wait vs liveness timeout on the control plane, and what a private daemon leaves in
// the runtime dir: nothing when it stops cleanly, its log (named in the error) when it fails.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "compute/io/daemon_connect.hpp"
#include "ioserver/control/daemonize.hpp"
#include "shared/ipc/control_client.hpp"
#include "shared/ipc/ioserver_launch.hpp"
#include "shared/ipc/protocol.hpp"
#include "shared/ipc/runtime_dir.hpp"
#include "test_control_support.hpp"

using namespace waste;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// A stand-in daemon in a child process: a REP socket that answers every request with `ok`
// after `delay` (or never, when delay < 0). Returns its pid once the socket is bound.
pid_t fake_daemon(const std::string& endpoint, std::chrono::milliseconds delay) {
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(ready[0]);
    zmq::context_t context(1);
    zmq::socket_t rep(context, zmq::socket_type::rep);
    rep.bind(endpoint);
    const char r = 'r';
    if (::write(ready[1], &r, 1) != 1) ::_exit(2);
    for (;;) {
      zmq::message_t request;
      if (!rep.recv(request, zmq::recv_flags::none)) continue;
      if (delay.count() < 0) {
        for (;;) ::pause();
      }
      std::this_thread::sleep_for(delay);
      const std::string reply = ipc::make_ok(nlohmann::json{{"pid", ::getpid()}}).dump();
      rep.send(zmq::buffer(reply), zmq::send_flags::none);
    }
  }
  ::close(ready[1]);
  char r = 0;
  REQUIRE(::read(ready[0], &r, 1) == 1);
  ::close(ready[0]);
  return pid;
}

void reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace

TEST_CASE("a slow daemon fails the liveness timeout but answers within the start-up wait", "[ioserver][control]") {
  test::ScopedRuntimeDir runtime;
  REQUIRE(ipc::ensure_runtime_dir());
  const std::string endpoint = "ipc://" + (ipc::runtime_dir() / "slow.sock").string();
  const pid_t pid = fake_daemon(endpoint, 2500ms);  // answers, but only after 2.5 s
  auto client = ipc::ControlClient::connect(endpoint);
  REQUIRE(client);
  client->follow_pid(pid);
  auto hurried = client->ping();  // liveness bound: 1.5 s
  REQUIRE_FALSE(hurried);
  CHECK(hurried.error().message ==
        "waste-ioserver at " + endpoint + " did not answer within 1500 ms (is it running?)");
  auto patient = client->call(ipc::make_request("ping"), ipc::kStartupControlTimeout);
  REQUIRE(patient);
  CHECK((*patient)["pid"] == pid);
  reap(pid);
}

TEST_CASE("a followed daemon that dies fails the call at once, even under the start-up wait", "[ioserver][control]") {
  test::ScopedRuntimeDir runtime;
  REQUIRE(ipc::ensure_runtime_dir());
  const std::string endpoint = "ipc://" + (ipc::runtime_dir() / "dying.sock").string();
  const pid_t pid = fake_daemon(endpoint, -1ms);  // takes the request, never answers
  auto client = ipc::ControlClient::connect(endpoint);
  REQUIRE(client);
  client->follow_pid(pid);
  const auto t0 = std::chrono::steady_clock::now();
  auto pending = std::async(std::launch::async, [&] { return client->call(ipc::make_request("ping"), 30s); });
  std::this_thread::sleep_for(300ms);
  reap(pid);
  REQUIRE(pending.wait_for(5s) == std::future_status::ready);
  auto r = pending.get();
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::ipc);
  CHECK(r.error().message == "waste-ioserver (pid " + std::to_string(pid) + ") at " + endpoint +
                                 " exited before answering");
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);  // nowhere near the 30 s bound
}

#ifdef WASTE_IOSERVER_BIN

TEST_CASE("an auto-started daemon exits after its linger and leaves nothing in the runtime dir", "[ioserver][control]") {
  test::ScopedRuntimeDir runtime;
  ::setenv("WASTE_IOSERVER", WASTE_IOSERVER_BIN, 1);
  ::setenv("WASTE_LINGER_MS", "200", 1);
  test::TempDir t("autolog");
  const auto model = test::make_tiny_container(t.path);
  REQUIRE_FALSE(model.empty());
  const std::string instance = ipc::instance_for_container(model).value();
  fs::path log;
  int pid = 0;
  {
    auto conn = connect_or_spawn(model, /*allow_spawn=*/true);
    REQUIRE(conn);
    REQUIRE(conn->spawned());
    log = conn->daemon().log;
    pid = conn->daemon().pid;
    CHECK(conn->daemon().instance == instance);   // the container's shareable daemon
    CHECK(log == ipc::default_log_path(instance));
    CHECK(fs::exists(log));  // while it runs, the log is there
  }
  REQUIRE(ipc::wait_process_gone(pid, 10000));
  CHECK_FALSE(fs::exists(log));
  for (const auto& entry : fs::directory_iterator(ipc::runtime_dir())) FAIL("left behind: " << entry.path());
  ::unsetenv("WASTE_LINGER_MS");
  ::unsetenv("WASTE_IOSERVER");
}

TEST_CASE("an auto-started daemon that fails to start keeps its log and the error says where", "[ioserver][control]") {
  test::ScopedRuntimeDir runtime;
  ::setenv("WASTE_IOSERVER", WASTE_IOSERVER_BIN, 1);
  test::TempDir t("autofail");
  const auto model = test::make_tiny_container(t.path);
  REQUIRE_FALSE(model.empty());
  REQUIRE(ipc::ensure_runtime_dir());
  // A directory (not empty, so stale-file removal leaves it) where the socket must go: the
  // daemon opens its log, then fails to bind.
  const std::string instance = ipc::instance_for_container(model).value();
  const fs::path blocker = ipc::socket_path(instance);
  fs::create_directories(blocker / "x");
  auto conn = connect_or_spawn(model, /*allow_spawn=*/true);
  REQUIRE_FALSE(conn);
  const fs::path log = ipc::default_log_path(instance);
  INFO(conn.error().message);
  CHECK(conn.error().message.find("(its log: " + log.string() + ")") != std::string::npos);
  REQUIRE(fs::exists(log));
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str().find("start-up failed: ") != std::string::npos);
  CHECK_FALSE(fs::exists(ipc::machine_ledger_path()));   // a failed daemon holds no budget
  ::unsetenv("WASTE_IOSERVER");
}

#endif

TEST_CASE("the starter gives up on a live daemon that never reports ready", "[ioserver][control]") {
  // In a child, so the daemon side (which would go on running this test binary) can be ended.
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto outcome = ioserver::daemonize(300ms, "/nonexistent/waste-silent.log");
    if (!outcome) ::_exit(3);
    if (outcome->is_daemon) {
      std::this_thread::sleep_for(3s);  // alive, pipe open, never a word
      ::_exit(0);
    }
    ::_exit(outcome->exit_code == 1 ? 0 : 4);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // the starter reported failure ...
  CHECK(std::chrono::steady_clock::now() - t0 < 2500ms);  // ... at the bound, not when the daemon went
}

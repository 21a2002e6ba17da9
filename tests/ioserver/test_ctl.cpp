// waste-ctl and waste-ioserver as processes, on a synthesized tiny container.
#include <catch2/catch.hpp>

#include <signal.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "shared/ipc/control_client.hpp"
#include "shared/ipc/ioserver_launch.hpp"
#include "shared/ipc/runtime_dir.hpp"
#include "shared/ipc/segment_names.hpp"
#include "shared/memory/budget.hpp"
#include "test_control_support.hpp"

using namespace waste;
namespace fs = std::filesystem;

#ifdef WASTE_CTL_BIN

namespace {

std::string ctl(const std::string& args) { return std::string(WASTE_CTL_BIN) + " " + args; }

bool shm_exists(const std::string& name) { return fs::exists(fs::path("/dev/shm") / name); }

}  // namespace

TEST_CASE("waste-ctl start, status, stats and stop a daemon on a tiny container", "[ioserver][control]") {
  test::ScopedRuntimeDir runtime;
  test::TempDir t("ctl");
  const auto model = test::make_tiny_container(t.path);
  REQUIRE_FALSE(model.empty());
  const std::string name = "ctl-" + std::to_string(::getpid());

  auto started = test::run_command(ctl("start " + model.string() + " --name " + name + " --budget 64M"));
  INFO(started.output);
  REQUIRE(started.exit_code == 0);
  const std::string sock = "ipc://" + (ipc::runtime_dir() / ("waste-" + name + ".sock")).string();
  CHECK(started.output.find("socket " + sock + "\n") != std::string::npos);
  CHECK(started.output.find("budget 64.0 MB (67108864 bytes)") != std::string::npos);
  CHECK(shm_exists(ipc::arena_segment_name(name)));

  // A second daemon for the same instance is refused.
  auto twin = test::run_command(ctl("start " + model.string() + " --name " + name));
  CHECK(twin.exit_code != 0);
  CHECK(twin.output.find("is already running") != std::string::npos);

  // A client attaches over the control plane; status and stats see it.
  auto client = ipc::ControlClient::connect(sock);
  REQUIRE(client);
  auto refused = client->attach({::getpid(), 64ULL << 20});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.rfind("attach refused for " + fs::canonical(model).string() + ": budget 64.0 MB holds trunk ", 0) == 0);
  auto lease = client->attach({::getpid(), 1ULL << 20});
  REQUIRE(lease);
  CHECK(lease->arena_segment == ipc::arena_segment_name(name));
  REQUIRE(client->heartbeat(lease->client_idx, ::getpid()));

  auto status = test::run_command(ctl("status"));
  INFO(status.output);
  CHECK(status.exit_code == 0);
  CHECK(status.output.find(name + "  pid ") != std::string::npos);
  CHECK(status.output.find("1 client(s)") != std::string::npos);
  CHECK(status.output.find("state 1.0 MB") != std::string::npos);

  auto stats = test::run_command(ctl("stats " + name + " --json"));
  REQUIRE(stats.exit_code == 0);
  const auto j = nlohmann::json::parse(stats.output);
  CHECK(j["budget"]["budget_bytes"] == (64ULL << 20));
  CHECK(j["budget"]["clients_bytes"] == (1ULL << 20));
  CHECK(j["totals"]["record_bytes"] == 12288);
  CHECK(j["clients"].size() == 1);
  auto watch = test::run_command(ctl("stats " + name + " --watch --interval 0.05 --count 2"));
  CHECK(watch.exit_code == 0);
  CHECK(watch.output.find("budget   ") != std::string::npos);

  REQUIRE(client->detach({lease->client_idx, ::getpid(), lease->lease.generation}));
  auto stopped = test::run_command(ctl("stop " + name));
  INFO(stopped.output);
  CHECK(stopped.exit_code == 0);
  CHECK(stopped.output.find("stopped " + name) != std::string::npos);
  CHECK_FALSE(fs::exists(ipc::socket_path(name)));
  CHECK_FALSE(fs::exists(ipc::info_path(name)));
  CHECK_FALSE(shm_exists(ipc::arena_segment_name(name)));
  CHECK_FALSE(shm_exists(ipc::trunk_segment_name(name)));
}

TEST_CASE("waste-ctl start refuses a budget below the floor", "[ioserver][control]") {
  test::ScopedRuntimeDir runtime;
  test::TempDir t("floor");
  const auto model = test::make_tiny_container(t.path);
  REQUIRE_FALSE(model.empty());
  auto r = test::run_command(ctl("start " + model.string() + " --name floor-" + std::to_string(::getpid()) + " --budget 1M"));
  CHECK(r.exit_code != 0);
  CHECK(r.output.find("waste-ioserver: budget 1.0 MB is below the floor ") != std::string::npos);
  CHECK(r.output.find(" for this model") != std::string::npos);
}

TEST_CASE("stale socket, info file and segments of a kill -9'd daemon are found and cleaned", "[ioserver][control]") {
  test::ScopedRuntimeDir runtime;
  test::TempDir t("stale");
  const auto model = test::make_tiny_container(t.path);
  REQUIRE_FALSE(model.empty());
  const std::string name = "stale-" + std::to_string(::getpid());
  REQUIRE(test::run_command(ctl("start " + model.string() + " --name " + name)).exit_code == 0);
  auto info = ipc::read_daemon_info(ipc::info_path(name));
  REQUIRE(info);
  REQUIRE(::kill(info->pid, SIGKILL) == 0);
  REQUIRE(ipc::wait_process_gone(info->pid, 5000));
  CHECK(fs::exists(ipc::socket_path(name)));
  CHECK(shm_exists(ipc::arena_segment_name(name)));

  auto status = test::run_command(ctl("status"));
  CHECK(status.output.find(name + "  stale: pid " + std::to_string(info->pid) + " is not running") != std::string::npos);
  auto client = ipc::ControlClient::connect(info->socket);
  if (client) {
    auto r = client->ping();
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::ipc);
  }

  auto restarted = test::run_command(ctl("start " + model.string() + " --name " + name));
  INFO(restarted.output);
  REQUIRE(restarted.exit_code == 0);
  CHECK(restarted.output.find("removed stale " + ipc::socket_path(name).string()) != std::string::npos);
  CHECK(restarted.output.find("removed stale shm " + ipc::arena_segment_name(name)) != std::string::npos);
  auto fresh = ipc::read_daemon_info(ipc::info_path(name));
  REQUIRE(fresh);
  CHECK(fresh->pid != info->pid);
  REQUIRE(test::run_command(ctl("stop " + name)).exit_code == 0);
  CHECK_FALSE(shm_exists(ipc::arena_segment_name(name)));
}


TEST_CASE("waste-ctl start and waste-ioserver take one daemon option set: same help, same refusals",
          "[ioserver][control][cli]") {
  test::ScopedRuntimeDir runtime;
  test::TempDir t("opts");
  // Both binaries refuse the same out-of-range value with the same words (exit 2, nothing started).
  for (const auto& [bin, who] : {std::pair{std::string(WASTE_CTL_BIN) + " start", std::string("waste-ctl")},
                                 std::pair{std::string(WASTE_IOSERVER_BIN), std::string("waste-ioserver")}}) {
    INFO(who);
    auto r = test::run_command(bin + " " + t.path.string() + " --max-clients 65");
    CHECK(r.exit_code == 2);
    CHECK(r.output == who + ": --max-clients must be between 1 and 64, not 65\n");
    r = test::run_command(bin + " " + t.path.string() + " --clients 2");
    CHECK(r.exit_code == 2);
    CHECK(r.output == who + ": --clients was renamed --reserve-clients (clients whose state the budget reserves "
                            "room for; --max-clients caps how many attach)\n");
  }
  // Every option line of waste-ioserver's help (but its own --foreground) is in waste-ctl start's.
  const auto daemon_help = test::run_command(std::string(WASTE_IOSERVER_BIN) + " --help").output;
  const auto ctl_help = test::run_command(ctl("start --help")).output;
  std::istringstream lines(daemon_help);
  int options = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("  --") != 0 || line.find("--foreground") != std::string::npos) continue;
    INFO(line);
    CHECK(ctl_help.find(line) != std::string::npos);
    ++options;
  }
  CHECK(options == 16);  // --budget .. --first-attach-grace, --engram-pool, --fill
  for (const char* name : {"--verify", "--io-uring", "--max-clients", "--reader-threads", "--reserve-clients"}) {
    INFO(name);
    CHECK(ctl_help.find(std::string("  ") + name) != std::string::npos);
  }
}

TEST_CASE("waste-ctl start hands --max-clients, --reader-threads and --verify to the daemon", "[ioserver][control]") {
  test::ScopedRuntimeDir runtime;
  test::TempDir t("pass");
  const auto model = test::make_tiny_container(t.path);
  REQUIRE_FALSE(model.empty());
  const std::string name = "pass-" + std::to_string(::getpid());
  auto started = test::run_command(ctl("start " + model.string() + " --name " + name +
                                       " --budget 64M --max-clients 2 --reader-threads 3 --verify"));
  INFO(started.output);
  REQUIRE(started.exit_code == 0);
  auto info = ipc::read_daemon_info(ipc::info_path(name));
  REQUIRE(info);
  auto client = ipc::ControlClient::connect(info->socket);
  REQUIRE(client);
  // Two leases fit, the third is refused: the daemon got --max-clients 2.
  auto a = client->attach({::getpid(), 1ULL << 20});
  auto b = client->attach({::getpid(), 1ULL << 20});
  REQUIRE((a && b));
  auto c = client->attach({::getpid(), 1ULL << 20});
  REQUIRE_FALSE(c);
  CHECK(c.error().message.find("attach: all 2 client slots are in use") != std::string::npos);
  std::ifstream in(info->log);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(log);
  CHECK(log.find("data plane: echo cache, 3 reader threads, direct I/O asked, CRC verify on, at most 2 clients") !=
        std::string::npos);
  REQUIRE(test::run_command(ctl("stop " + name)).exit_code == 0);
}

#endif

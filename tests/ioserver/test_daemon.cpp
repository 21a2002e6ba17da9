// connect_or_spawn: the compute side finds (or starts) the daemon for a container.
#include <catch2/catch.hpp>

#include "compute/io/daemon_connect.hpp"
#include "shared/ipc/control_client.hpp"
#include "shared/ipc/ioserver_launch.hpp"
#include "shared/ipc/segment_names.hpp"
#include "shared/memory/memory_plan.hpp"
#include "test_control_support.hpp"

using namespace waste;
namespace fs = std::filesystem;

#ifdef WASTE_IOSERVER_BIN

TEST_CASE("connect_or_spawn starts a private daemon and stops it with the connection", "[ioserver][control]") {
  test::ScopedRuntimeDir runtime;
  ::setenv("WASTE_IOSERVER", WASTE_IOSERVER_BIN, 1);
  test::TempDir t("spawn");
  const auto model = test::make_tiny_container(t.path);
  REQUIRE_FALSE(model.empty());

  auto refused = connect_or_spawn(model, /*allow_private=*/false);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message == "no waste-ioserver serves " + model.string());

  int daemon_pid = 0;
  {
    auto conn = connect_or_spawn(model, /*allow_private=*/true);
    REQUIRE(conn);
    CHECK(conn->private_daemon());
    daemon_pid = conn->daemon().pid;
    CHECK(ipc::process_alive(daemon_pid));
    const std::string instance = "private-" + std::to_string(::getpid());
    CHECK(conn->daemon().instance == instance);
    CHECK(conn->lease().segment_name == ipc::arena_segment_name(instance));
    CHECK(conn->lease().trunk_segment_name == ipc::trunk_segment_name(instance));
    CHECK(conn->lease().daemon_pid == daemon_pid);
    auto stats = ipc::ControlClient::connect(conn->daemon().socket)->stats();
    REQUIRE(stats);
    REQUIRE((*stats)["clients"].size() == 1);
    // It declared the container's per-client memory: state + scratch.
    CHECK((*stats)["clients"][0]["state_bytes"] == plan_memory(model)->client_bytes());
    CHECK(conn->heartbeat_error().empty());
  }
  CHECK(ipc::wait_process_gone(daemon_pid, 5000));
  ::unsetenv("WASTE_IOSERVER");
}

TEST_CASE("connect_or_spawn attaches to the daemon already serving the container", "[ioserver][control]") {
  test::ScopedRuntimeDir runtime;
  ::setenv("WASTE_IOSERVER", WASTE_IOSERVER_BIN, 1);
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
    CHECK_FALSE(first->private_daemon());
    CHECK(first->daemon().pid == served->pid);
    CHECK(first->lease().client_idx != second->lease().client_idx);
    auto stats = ipc::ControlClient::connect(served->socket)->stats();
    CHECK((*stats)["budget"]["clients_bytes"] == 3000);
  }
  auto after = ipc::ControlClient::connect(served->socket)->stats();
  REQUIRE(after);
  CHECK((*after)["clients"].empty());   // both detached on destruction
  REQUIRE(ipc::ControlClient::connect(served->socket)->shutdown(0));
  CHECK(ipc::wait_process_gone(served->pid, 5000));
  ::unsetenv("WASTE_IOSERVER");
}

#endif

#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>

#include <zmq.hpp>

#include "ioserver/daemon.hpp"
#include "shared/ipc/control_client.hpp"
#include "test_control_support.hpp"

using namespace waste;
using namespace waste::ioserver;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A scripted data plane: records what the control plane asked of it.
struct FakeLog {
  std::mutex mutex;
  std::vector<int> detached;
  std::string policy = "lfru";
  int next_idx = 0;
  bool stopped = false;
};

class FakePlane final : public DataPlane {
 public:
  explicit FakePlane(std::shared_ptr<FakeLog> log) : log_(std::move(log)) {}
  Result<PlaneLease> attach(int pid) override {
    std::lock_guard lock(log_->mutex);
    PlaneLease lease;
    lease.client_idx = log_->next_idx++;
    lease.arena_segment = "fake_arena";
    lease.trunk_segment = "fake_trunk";
    lease.extra = json{{"generation", 7}};
    return lease;
  }
  Status detach(int client_idx) override {
    std::lock_guard lock(log_->mutex);
    log_->detached.push_back(client_idx);
    return ok();
  }
  void reclaim_dead_clients() override {}
  [[nodiscard]] json stats() const override {
    return json{{"totals", {{"hits", 5}, {"misses", 3}, {"direct_io", true}}},
                {"clients", json::array({json{{"client_idx", 0}, {"hits", 4}, {"misses", 1}}})}};
  }
  Status set_policy(std::string_view policy) override {
    std::lock_guard lock(log_->mutex);
    log_->policy = std::string(policy);
    return ok();
  }
  void stop() override {
    std::lock_guard lock(log_->mutex);
    log_->stopped = true;
  }

 private:
  std::shared_ptr<FakeLog> log_;
};

// A valid manifest (the plan is computed from Manifest::parse): 4 KiB of trunk, 4 KiB records.
const char* kManifest = R"({"format_version": 0, "tensor_prefix": "",
  "config": {"num_hidden_layers": 2, "hidden_size": 8, "num_experts": 4, "num_experts_per_token": 1,
             "vocab_size": 16, "first_k_dense_replace": 1, "intermediate_size": 8, "moe_intermediate_size": 8,
             "num_attention_heads": 1, "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 0,
             "v_head_dim": 8},
  "layers": {"1": {"file": "experts-L1.bin", "experts": 4, "bytes": 16384, "codebook_base": 0}},
  "trunk": [{"name": "model.norm.weight", "fmt": 0, "off": 0, "shape": [1024], "bytes": 4096}]})";

// A daemon with a fake data plane, served from a thread.
struct InProcessDaemon {
  test::ScopedRuntimeDir runtime;
  test::TempDir model{"model"};
  std::shared_ptr<FakeLog> log = std::make_shared<FakeLog>();
  std::unique_ptr<Daemon> daemon;
  std::thread thread;
  DaemonSetup setup;

  explicit InProcessDaemon(std::optional<std::uint64_t> budget = std::nullopt) {
    std::ofstream(model.path / "manifest.json") << kManifest;
    DaemonOptions o;
    o.model = model.path;
    o.instance = "ctl-test";
    o.budget_bytes = budget;
    o.handle_signals = false;
    o.log_to_stderr = false;
    o.ram = usable_ram(64ULL << 30, std::nullopt);
    auto s = resolve_setup(o);
    REQUIRE(s);
    setup = *s;
    auto d = Daemon::init(setup, [this](const DataPlaneConfig&) -> Result<std::unique_ptr<DataPlane>> {
      return std::unique_ptr<DataPlane>(std::make_unique<FakePlane>(log));
    });
    REQUIRE(d);
    daemon = std::move(*d);
    thread = std::thread([this] { (void)daemon->run(); });
  }
  ~InProcessDaemon() {
    daemon->stop();
    if (thread.joinable()) thread.join();
  }
  ipc::ControlClient client() { return ipc::ControlClient::connect(daemon->info().socket).value(); }
};

}  // namespace

TEST_CASE("control plane round trip: ping, attach, stats, detach, config", "[ioserver][control]") {
  InProcessDaemon d(std::uint64_t{8} << 20);
  auto c = d.client();

  auto pong = c.ping();
  REQUIRE(pong);
  CHECK((*pong)["instance"] == "ctl-test");
  CHECK((*pong)["pid"] == ::getpid());
  CHECK((*pong)["budget_bytes"] == (8ULL << 20));

  const std::uint64_t trunk = 4096;
  const std::uint64_t arena = d.setup.arena_slots * 4096;
  CHECK(d.setup.arena_slots == ((8ULL << 20) - d.setup.plan.floor_bytes + d.setup.plan.min_expert_cache_bytes) / 4096);
  auto a = c.attach({::getpid(), 100000});
  REQUIRE(a);
  CHECK(a->client_idx == 0);
  CHECK(a->arena_segment == "fake_arena");
  CHECK(a->trunk_segment == "fake_trunk");
  CHECK(a->lease["generation"] == 7);
  CHECK(a->budget_bytes == (8ULL << 20));
  CHECK(a->used_bytes == trunk + arena + 100000);
  CHECK(a->daemon_pid == ::getpid());
  CHECK(a->record_bytes == 4096);

  REQUIRE(c.heartbeat(0, ::getpid()));
  auto wrong = c.heartbeat(0, ::getpid() + 1);
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().message == "client 0 (pid " + std::to_string(::getpid() + 1) + ") is not attached (reclaimed?)");

  auto s = c.stats();
  REQUIRE(s);
  CHECK((*s)["budget"]["used_bytes"] == trunk + arena + 100000);
  CHECK((*s)["budget"]["clients_bytes"] == 100000);
  CHECK((*s)["totals"]["hits"] == 5);
  REQUIRE((*s)["clients"].size() == 1);
  CHECK((*s)["clients"][0]["pid"] == ::getpid());
  CHECK((*s)["clients"][0]["hits"] == 4);   // merged from the data plane's per-client stats
  CHECK((*s)["clients"][0]["state_bytes"] == 100000);

  auto cfg = c.configure(ipc::ConfigRequest{std::string("lru"), std::nullopt});
  REQUIRE(cfg);
  CHECK((*cfg)["policy"] == "lru");
  {
    std::lock_guard lock(d.log->mutex);
    CHECK(d.log->policy == "lru");
  }
  auto bad_policy = c.configure(ipc::ConfigRequest{std::string("mru"), std::nullopt});
  REQUIRE_FALSE(bad_policy);
  CHECK(bad_policy.error().message == "config: policy 'mru' is not lfru or lru");
  auto shrink = c.configure(ipc::ConfigRequest{std::nullopt, trunk + arena + 99999});
  REQUIRE_FALSE(shrink);
  CHECK(shrink.error().code == Errc::ram_budget);

  REQUIRE(c.detach(0));
  {
    std::lock_guard lock(d.log->mutex);
    CHECK(d.log->detached == std::vector<int>{0});
  }
  auto again = c.detach(0);
  REQUIRE_FALSE(again);
  CHECK(again.error().message == "client 0 is not attached");
  CHECK((*c.stats())["clients"].empty());
}

TEST_CASE("attach over the budget is refused naming budget, used and requested", "[ioserver][control]") {
  InProcessDaemon d(std::uint64_t{8} << 20);
  auto c = d.client();
  const std::uint64_t budget = 8ULL << 20;
  const std::uint64_t used = 4096 + d.setup.arena_slots * 4096;
  auto refused = c.attach({::getpid(), budget});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::ram_budget);
  CHECK(refused.error().message == "attach refused: budget " + format_bytes(budget) + ", used " + format_bytes(used) +
                                       ", requested " + format_bytes(budget));
  {
    std::lock_guard lock(d.log->mutex);
    CHECK(d.log->next_idx == 0);   // the data plane was never asked
  }
  REQUIRE(c.attach({::getpid(), budget - used}));   // what is left fits exactly
}

TEST_CASE("a client whose pid died or whose heartbeat stopped is reclaimed", "[ioserver][control]") {
  InProcessDaemon d(std::uint64_t{8} << 20);
  auto c = d.client();
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  REQUIRE(c.attach({int(child), 1000}));        // dead pid
  REQUIRE(c.attach({::getpid(), 2000}));        // alive, never heartbeats
  auto clients = [&] { return (*c.stats())["clients"].size(); };
  // Bounded waits (not timing assertions): reclaim runs every 200 ms, the heartbeat timeout is 1.5 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (clients() == 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto s = c.stats();
  REQUIRE((*s)["clients"].size() == 1);
  CHECK((*s)["clients"][0]["pid"] == ::getpid());
  while (clients() == 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(clients() == 0);
  CHECK((*c.stats())["budget"]["clients_bytes"] == 0);
  std::lock_guard lock(d.log->mutex);
  CHECK(d.log->detached == std::vector<int>{0, 1});
}

TEST_CASE("shutdown drains, stops the data plane and removes socket and info file", "[ioserver][control]") {
  InProcessDaemon d;
  const fs::path sock = ipc::socket_path("ctl-test");
  const fs::path info = ipc::info_path("ctl-test");
  struct stat st{};
  REQUIRE(::stat(sock.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(::stat(ipc::runtime_dir().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  auto read = ipc::read_daemon_info(info);
  REQUIRE(read);
  CHECK(read->pid == ::getpid());
  CHECK(read->socket == "ipc://" + sock.string());
  CHECK(read->budget_bytes == d.setup.budget.budget_bytes);

  auto c = d.client();
  REQUIRE(c.attach({::getpid(), 10}));
  REQUIRE(c.shutdown(100));
  auto late = c.attach({::getpid(), 10});
  if (!late) CHECK(late.error().message.find("shutting down") != std::string::npos);
  d.thread.join();
  CHECK_FALSE(fs::exists(sock));
  CHECK_FALSE(fs::exists(info));
  std::lock_guard lock(d.log->mutex);
  CHECK(d.log->stopped);
  CHECK(d.log->detached == std::vector<int>{0});
}

TEST_CASE("requests of another protocol version and unknown ops are refused", "[ioserver][control]") {
  InProcessDaemon d;
  auto c = d.client();
  auto old = c.call(json{{"v", 99}, {"op", "ping"}});
  REQUIRE_FALSE(old);
  CHECK(old.error().code == Errc::ipc);
  CHECK(old.error().message == "request uses protocol version 99, this side speaks 1");
  auto unknown = c.call(ipc::make_request("explode"));
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().message == "unknown op 'explode'");
  auto malformed = c.call(ipc::make_request("detach", json{{"client_idx", "zero"}}));
  REQUIRE_FALSE(malformed);
  CHECK(malformed.error().message.rfind("detach: ", 0) == 0);
  REQUIRE(c.ping());   // the daemon is still serving
}

TEST_CASE("a dead daemon is a clear error, never a hang", "[ioserver][control]") {
  test::ScopedRuntimeDir runtime;
  REQUIRE(ipc::ensure_runtime_dir());
  auto missing = ipc::ControlClient::connect("ipc://" + (ipc::runtime_dir() / "nobody.sock").string());
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message == "no waste-ioserver socket at " + (ipc::runtime_dir() / "nobody.sock").string());

  // A socket file nobody listens on: what a kill -9'd daemon leaves.
  const fs::path stale = ipc::runtime_dir() / "stale.sock";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", stale.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  ::close(fd);
  auto c = ipc::ControlClient::connect("ipc://" + stale.string(), std::chrono::milliseconds(500));
  REQUIRE(c);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c->ping();
  const auto waited = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::ipc);
  CHECK(r.error().message == "waste-ioserver at ipc://" + stale.string() +
                                 " did not accept the request within 500 ms (is it running?)");
  CHECK(waited < std::chrono::seconds(2));
}

TEST_CASE("protocol messages round-trip through JSON", "[ioserver][control]") {
  ipc::AttachReply reply;
  reply.client_idx = 3;
  reply.arena_segment = "waste_1000_x_arena";
  reply.trunk_segment = "waste_1000_x_trunk";
  reply.budget_bytes = 1ULL << 33;
  reply.used_bytes = 12345;
  reply.arena_slots = 99;
  reply.record_bytes = 12288;
  reply.daemon_pid = 42;
  reply.instance = "x";
  reply.lease = json{{"generation", 5}};
  auto back = ipc::attach_reply_from_json(ipc::to_json(reply));
  REQUIRE(back);
  CHECK(ipc::to_json(*back) == ipc::to_json(reply));
  auto parsed = ipc::parse_reply(ipc::make_error_reply(Error{Errc::ram_budget, "no room"}).dump());
  REQUIRE_FALSE(parsed);
  CHECK(parsed.error().code == Errc::ram_budget);
  CHECK(parsed.error().message == "no room");
  auto req = ipc::parse_request(ipc::make_request("attach", ipc::to_json(ipc::AttachRequest{7, 9})).dump());
  REQUIRE(req);
  CHECK(req->op == "attach");
  auto attach = ipc::attach_request_from_json(req->body);
  REQUIRE(attach);
  CHECK(attach->pid == 7);
  CHECK(attach->state_bytes == 9);
}

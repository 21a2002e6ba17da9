#include <catch2/catch.hpp>

#include <signal.h>
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

#include "ioserver/daemon/daemon.hpp"
#include "shared/ipc/control_client.hpp"
#include "shared/ipc/ioserver_launch.hpp"
#include "shared/ipc/peer_credentials.hpp"
#include "shared/ipc/process_liveness.hpp"
#include "shared/memory/budget.hpp"
#include "shared/memory/machine_ledger.hpp"
#include "test_control_support.hpp"
#include "test_support.hpp"

using namespace waste;
using test::eventually;
using namespace waste::ioserver;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A scripted data plane: records what the control plane asked of it.
struct FakeLog {
  std::mutex mutex;
  std::vector<int> detached;
  std::vector<std::uint32_t> cache_slots;   // every set_cache_slots, in order
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
    lease.lease.generation = std::uint64_t(7 + lease.client_idx);
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
  Status set_cache_slots(std::uint32_t usable_slots) override {
    std::lock_guard lock(log_->mutex);
    log_->cache_slots.push_back(usable_slots);
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

struct InProcessOptions {
  std::optional<std::uint64_t> budget;
  std::string instance = "ctl-test";
  std::optional<std::chrono::milliseconds> linger;
  std::uint64_t usable_ram = 64ULL << 30;
  const char* manifest = kManifest;
};

// A daemon with a fake data plane, served from a thread. Owns no runtime dir (tests that run
// two daemons share one).
struct InProcessDaemonIn {
  test::TempDir model{"model"};
  std::shared_ptr<FakeLog> log = std::make_shared<FakeLog>();
  std::unique_ptr<Daemon> daemon;
  std::thread thread;
  DaemonSetup setup;
  Error init_error{Errc::io, ""};

  explicit InProcessDaemonIn(const InProcessOptions& io, bool require_ok = true) {
    std::ofstream(model.path / "manifest.json") << io.manifest;
    DaemonOptions o;
    o.io.container = model.path;
    o.io.instance = io.instance;
    o.budget_bytes = io.budget;
    o.handle_signals = false;
    o.log_to_stderr = false;
    o.linger = io.linger;
    o.first_attach_grace = std::chrono::milliseconds(0);
    o.ram = usable_ram(io.usable_ram, std::nullopt);
    auto s = resolve_setup(o);
    REQUIRE(s);
    setup = *s;
    auto d = Daemon::init(setup, [this](const IoServerConfig&) -> Result<std::unique_ptr<DataPlane>> {
      return std::unique_ptr<DataPlane>(std::make_unique<FakePlane>(log));
    });
    if (!d) {
      init_error = d.error();
      if (require_ok) FAIL(d.error().message);
      return;
    }
    daemon = std::move(*d);
    thread = std::thread([this] { (void)daemon->run(); });
  }
  ~InProcessDaemonIn() {
    if (daemon) daemon->stop();
    if (thread.joinable()) thread.join();
  }
  ipc::ControlClient client() { return ipc::ControlClient::connect(daemon->info().socket).value(); }
};

InProcessOptions with_budget(std::optional<std::uint64_t> budget) {
  InProcessOptions o;
  o.budget = budget;
  return o;
}

struct InProcessDaemon {
  test::ScopedRuntimeDir runtime;
  InProcessDaemonIn in;
  std::unique_ptr<Daemon>& daemon = in.daemon;
  std::thread& thread = in.thread;
  DaemonSetup& setup = in.setup;
  std::shared_ptr<FakeLog>& log = in.log;
  explicit InProcessDaemon(std::optional<std::uint64_t> budget = std::nullopt) : in(with_budget(budget)) {}
  explicit InProcessDaemon(const InProcessOptions& o) : in(o) {}
  ipc::ControlClient client() { return in.client(); }
};

// A process that attaches itself: the daemon takes a client's pid from the socket (SO_PEERCRED),
// so a test cannot attach on another process's behalf. Forked before the daemon's thread exists
// (declare it first); attach() hands it the endpoint and returns {client_idx, generation}, then
// it exits (exit_after) or waits to be killed.
struct AttachingChild {
  pid_t pid = -1;
  int to_child[2] = {-1, -1};
  int from_child[2] = {-1, -1};
  AttachingChild(std::uint64_t state_bytes, bool exit_after) {
    REQUIRE(::pipe(to_child) == 0);
    REQUIRE(::pipe(from_child) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid != 0) return;
    std::uint32_t n = 0;
    std::string endpoint;
    if (::read(to_child[0], &n, sizeof n) == ssize_t(sizeof n) && n < 4096) {
      endpoint.resize(n);
      if (::read(to_child[0], endpoint.data(), n) != ssize_t(n)) ::_exit(2);
    }
    std::int64_t out[2] = {-1, 0};
    if (auto c = ipc::ControlClient::connect(endpoint)) {
      if (auto a = c->attach({::getpid(), state_bytes})) {
        out[0] = a->client_idx;
        out[1] = std::int64_t(a->lease.generation);
      }
    }
    if (::write(from_child[1], out, sizeof out) != ssize_t(sizeof out)) ::_exit(3);
    if (exit_after) ::_exit(0);
    for (;;) ::pause();
  }
  std::pair<int, std::uint64_t> attach(const std::string& endpoint) const {
    const auto n = std::uint32_t(endpoint.size());
    REQUIRE(::write(to_child[1], &n, sizeof n) == ssize_t(sizeof n));
    REQUIRE(::write(to_child[1], endpoint.data(), n) == ssize_t(n));
    std::int64_t in[2] = {-1, 0};
    REQUIRE(::read(from_child[0], in, sizeof in) == ssize_t(sizeof in));
    return {int(in[0]), std::uint64_t(in[1])};
  }
  void reap() {
    if (pid > 0) ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  ~AttachingChild() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(fd);
  }
};

ipc::DetachRequest lease_of(const ipc::AttachReply& a, int pid = ::getpid()) {
  return ipc::DetachRequest{a.client_idx, pid, a.lease.generation};
}

}  // namespace

TEST_CASE("control plane round trip: ping, attach, stats, detach, config", "[ioserver][control]") {
  InProcessDaemon d(std::uint64_t{8} << 20);
  auto c = d.client();

  auto pong = c.ping();
  REQUIRE(pong);
  CHECK((*pong)["instance"] == "ctl-test");
  CHECK((*pong)["pid"] == ::getpid());
  CHECK((*pong)["budget_bytes"] == (8ULL << 20));
  CHECK((*pong)["draining"] == false);
  CHECK((*pong)["auto_exit"] == false);

  const std::uint64_t budget = 8ULL << 20;
  const std::uint64_t trunk = 4096;
  const std::uint64_t slots = d.setup.arena_slots;
  CHECK(slots == (budget - d.setup.plan.floor_bytes + d.setup.plan.min_expert_cache_bytes) / 4096);
  // The cache keeps what the budget leaves beside the trunk and the client's state.
  const std::uint64_t after = std::min<std::uint64_t>(slots, (budget - trunk - 100000) / 4096);
  auto a = c.attach({::getpid(), 100000});
  REQUIRE(a);
  CHECK(a->client_idx == 0);
  CHECK(a->arena_segment == "fake_arena");
  CHECK(a->trunk_segment == "fake_trunk");
  CHECK(a->lease.generation == 7);
  CHECK(a->budget_bytes == budget);
  CHECK(a->cache_slots == after);
  CHECK(a->used_bytes == trunk + after * 4096 + 100000);
  CHECK(a->daemon_pid == ::getpid());
  CHECK(a->record_bytes == 4096);

  REQUIRE(c.heartbeat(0, ::getpid()));
  auto wrong = c.heartbeat(0, ::getpid() + 1);
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().message == "client 0 (pid " + std::to_string(::getpid() + 1) + ") is not attached (reclaimed?)");

  auto s = c.stats();
  REQUIRE(s);
  CHECK((*s)["budget"]["used_bytes"] == trunk + after * 4096 + 100000);
  CHECK((*s)["budget"]["clients_bytes"] == 100000);
  CHECK((*s)["budget"]["cache_slots"] == after);
  CHECK((*s)["budget"]["floor_slots"] == 2);
  CHECK((*s)["totals"]["hits"] == 5);
  REQUIRE((*s)["clients"].size() == 1);
  CHECK((*s)["clients"][0]["pid"] == ::getpid());
  CHECK((*s)["clients"][0]["hits"] == 4);   // merged from the data plane's per-client stats
  CHECK((*s)["clients"][0]["state_bytes"] == 100000);
  CHECK((*s)["clients"][0]["generation"] == 7);

  auto cfg = c.configure(ipc::ConfigRequest{std::string("lru"), std::nullopt});
  REQUIRE(cfg);
  CHECK((*cfg)["policy"] == "lru");
  {
    std::lock_guard lock(d.log->mutex);
    CHECK(d.log->policy == "lru");
  }
  auto bad_policy = c.configure(ipc::ConfigRequest{std::string("mru"), std::nullopt});
  REQUIRE_FALSE(bad_policy);
  CHECK(bad_policy.error().message == "config: policy 'mru' is not echo, reuse, lfru or lru");
  // A lower budget shrinks the cache (down to the plan's floor); below the floor it is refused.
  const std::uint64_t floor = d.setup.plan.floor_bytes;
  auto low = c.configure(ipc::ConfigRequest{std::nullopt, floor - 1});
  REQUIRE_FALSE(low);
  CHECK(low.error().code == Errc::ram_budget);
  CHECK(low.error().message == "budget " + format_bytes(floor - 1) + " is below the floor " + format_bytes(floor) +
                                   " for this model");
  REQUIRE(c.configure(ipc::ConfigRequest{std::nullopt, floor + 100000}));
  const std::uint64_t shrunk = std::min<std::uint64_t>(slots, (floor - trunk) / 4096);
  CHECK((*c.stats())["budget"]["cache_slots"] == shrunk);
  if (shrunk != after) {
    std::lock_guard lock(d.log->mutex);
    REQUIRE_FALSE(d.log->cache_slots.empty());
    CHECK(d.log->cache_slots.back() == shrunk);
  }

  REQUIRE(c.detach(lease_of(*a)));
  {
    std::lock_guard lock(d.log->mutex);
    CHECK(d.log->detached == std::vector<int>{0});
  }
  auto again = c.detach(lease_of(*a));
  REQUIRE_FALSE(again);
  CHECK(again.error().message == "client 0 is not attached");
  CHECK((*c.stats())["clients"].empty());
}

TEST_CASE("budget: N clients are admitted by shrinking the cache, refused only at its floor", "[ioserver][control]") {
  // Budget for the arena plus one client's plan state: every further client's state comes out
  // of the cache, down to its floor of 2·top_k = 2 slots.
  InProcessDaemon d(std::uint64_t{8} << 20);
  auto c = d.client();
  const std::uint64_t budget = 8ULL << 20, trunk = 4096, slots = d.setup.arena_slots;
  const std::uint64_t state = 1ULL << 20;   // 256 slots' worth each
  std::vector<ipc::AttachReply> leases;
  std::uint64_t expected = slots;
  for (int i = 0;; ++i) {
    const std::uint64_t room = budget - trunk - state * std::uint64_t(i + 1);
    if (budget < trunk + state * std::uint64_t(i + 1) || room / 4096 < 2) break;
    expected = std::min<std::uint64_t>(slots, room / 4096);
    auto a = c.attach({::getpid(), state});
    INFO("client " << i);
    REQUIRE(a);
    CHECK(a->cache_slots == expected);
    leases.push_back(*a);
  }
  REQUIRE(leases.size() >= 4);   // the old ledger refused the second one
  {
    std::lock_guard lock(d.log->mutex);
    REQUIRE_FALSE(d.log->cache_slots.empty());
    CHECK(d.log->cache_slots.back() == expected);
  }
  // Hazard: one more would push the cache under its floor: refused, naming what is held.
  const std::uint64_t held = state * leases.size();
  std::string who;
  for (const auto& l : leases) {
    who += (who.empty() ? "" : ", ") + std::string("client ") + std::to_string(l.client_idx) + " pid " +
           std::to_string(::getpid()) + ": " + format_bytes(state);
  }
  auto refused = c.attach({::getpid(), state});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::ram_budget);
  const std::uint64_t fixed = trunk + 2 * 4096 + held;
  CHECK(refused.error().message == "attach refused for " + d.setup.model.string() + ": budget " + format_bytes(budget) +
                                       " holds trunk " + format_bytes(trunk) + " + expert cache floor 2 slots (" +
                                       format_bytes(8192) + ") + client state " + format_bytes(held) + " (" + who +
                                       "); requested " + format_bytes(state) + ", at most " +
                                       format_bytes(budget - fixed) + " fits (a budget of " +
                                       format_bytes(fixed + state) + " would hold it)");
  {
    std::lock_guard lock(d.log->mutex);
    CHECK(d.log->next_idx == int(leases.size()));   // the data plane was never asked
  }
  // The cache grows back as they leave.
  for (const auto& l : leases) REQUIRE(c.detach(lease_of(l)));
  CHECK((*c.stats())["budget"]["cache_slots"] == slots);
  std::lock_guard lock(d.log->mutex);
  CHECK(d.log->cache_slots.back() == slots);
}

TEST_CASE("a client is reclaimed when its process dies, never for a missing heartbeat", "[ioserver][control]") {
  AttachingChild child(1000, /*exit_after=*/true);
  InProcessDaemon d(std::uint64_t{8} << 20);
  auto c = d.client();
  REQUIRE(child.attach(d.daemon->info().socket).first == 0);   // attaches, then dies
  child.reap();
  REQUIRE(c.attach({::getpid(), 2000}));        // alive, never heartbeats
  auto clients = [&] { return (*c.stats())["clients"].size(); };
  REQUIRE(eventually([&] { return clients() == 1; }));
  auto s = c.stats();
  CHECK((*s)["clients"][0]["pid"] == ::getpid());
  // Well past the old 1.5 s heartbeat timeout: still attached.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  CHECK(clients() == 1);
  CHECK((*c.stats())["budget"]["clients_bytes"] == 2000);
  std::lock_guard lock(d.log->mutex);
  CHECK(d.log->detached == std::vector<int>{0});
}

TEST_CASE("a recycled pid is not its client: start time decides", "[ioserver][control]") {
  InProcessDaemon d(std::uint64_t{8} << 20);
  auto c = d.client();
  // Our own pid with a start time that is not ours: what a reused pid looks like.
  const std::uint64_t ticks = ipc::process_start_ticks(::getpid()).value();
  REQUIRE(c.attach({::getpid(), 1000, ticks + 1}));
  REQUIRE(c.attach({::getpid(), 1000, ticks}));
  REQUIRE(eventually([&] { return (*c.stats())["clients"].size() == 1; }));
  std::lock_guard lock(d.log->mutex);
  CHECK(d.log->detached == std::vector<int>{0});
}

TEST_CASE("a stopped client (SIGSTOP 10 s) is not reclaimed and resumes", "[ioserver][control][slow]") {
  AttachingChild attaching(1000, /*exit_after=*/false);   // waits to be killed
  const pid_t child = attaching.pid;
  InProcessDaemon d(std::uint64_t{8} << 20);
  auto c = d.client();
  const auto [idx, generation] = attaching.attach(d.daemon->info().socket);
  REQUIRE(idx == 0);
  REQUIRE(::kill(child, SIGSTOP) == 0);
  // Hazard: a client silent this long lost its pins under the heartbeat rule while it still
  // mapped slot bytes. Its process lives, so it stays.
  std::this_thread::sleep_for(std::chrono::seconds(10));
  auto s = c.stats();
  REQUIRE((*s)["clients"].size() == 1);
  CHECK((*s)["clients"][0]["pid"] == int(child));
  CHECK((*s)["clients"][0]["heartbeat_age_ms"].get<std::int64_t>() >= 10000);
  REQUIRE(::kill(child, SIGCONT) == 0);
  REQUIRE(c.detach(ipc::DetachRequest{idx, int(child), generation}));   // the resumed client's lease ends normally
  {
    std::lock_guard lock(d.log->mutex);
    CHECK(d.log->detached == std::vector<int>{idx});
  }
}

TEST_CASE("attach takes the client's pid from the socket (SO_PEERCRED): naming another pid is refused",
          "[ioserver][control]") {
  // Hazard: the daemon believed the pid in the attach JSON, so a client could name a process
  // about to die (and lose its pins to that death) or one that never dies (and never be reclaimed).
  InProcessDaemon d(std::uint64_t{8} << 20);
  auto c = d.client();
  const int other = int(::getppid());   // alive, and not this process
  auto lie = c.attach({other, 1000});
  REQUIRE_FALSE(lie);
  CHECK(lie.error().code == Errc::argument);
  CHECK(lie.error().message == "attach refused: the request names pid " + std::to_string(other) +
                                   ", the connecting process is pid " + std::to_string(::getpid()) + " (SO_PEERCRED)");
  CHECK((*c.stats())["clients"].empty());
  CHECK((*c.stats())["budget"]["clients_bytes"] == 0);
  auto honest = c.attach({::getpid(), 1000});
  REQUIRE(honest);
  CHECK((*c.stats())["clients"][0]["pid"] == ::getpid());
}

TEST_CASE("libzmq's Peer-Address is parsed for uid, gid and pid, and nothing else passes", "[ioserver][control]") {
  const auto unix_peer = ipc::parse_peer_address(":1000:1001:4242");
  REQUIRE(unix_peer);
  CHECK(unix_peer->uid == 1000);
  CHECK(unix_peer->gid == 1001);
  CHECK(unix_peer->pid == 4242);
  const auto named = ipc::parse_peer_address("/run/x.sock:0:0:7");
  REQUIRE(named);
  CHECK(named->pid == 7);
  for (const char* bad : {"", "127.0.0.1", ":1000:1000:", ":1000:1000:-5", ":1000:1000:0", ":x:1000:12", "12",
                          ":1000:1000:12a", ":99999999999:0:1"}) {
    INFO(bad);
    CHECK_FALSE(ipc::parse_peer_address(bad));
  }
}

TEST_CASE("a stale detach (wrong pid or generation) is ignored", "[ioserver][control]") {
  InProcessDaemon d(std::uint64_t{8} << 20);
  auto c = d.client();
  auto a = c.attach({::getpid(), 1000});
  REQUIRE(a);
  // Hazard: a reclaimed client's late detach, or a detach for the index's previous lease, must
  // not end the lease that holds the index now.
  auto old_generation = c.detach(ipc::DetachRequest{a->client_idx, ::getpid(), 6});
  REQUIRE_FALSE(old_generation);
  CHECK(old_generation.error().message == "stale detach ignored: client 0 is pid " + std::to_string(::getpid()) +
                                               " generation 7, not pid " + std::to_string(::getpid()) +
                                               " generation 6");
  auto other_pid = c.detach(ipc::DetachRequest{a->client_idx, ::getpid() + 1, 7});
  REQUIRE_FALSE(other_pid);
  CHECK(other_pid.error().message.rfind("stale detach ignored: client 0 is pid ", 0) == 0);
  {
    std::lock_guard lock(d.log->mutex);
    CHECK(d.log->detached.empty());
  }
  CHECK((*c.stats())["clients"].size() == 1);
  REQUIRE(c.detach(lease_of(*a)));
  std::lock_guard lock(d.log->mutex);
  CHECK(d.log->detached == std::vector<int>{0});
}

TEST_CASE("shutdown drains, stops the data plane and removes socket, info and lock files", "[ioserver][control]") {
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
  CHECK(fs::exists(ipc::lock_path("ctl-test")));
  CHECK(fs::exists(ipc::machine_ledger_path()));

  auto c = d.client();
  REQUIRE(c.attach({::getpid(), 10}));
  REQUIRE(c.shutdown(100));
  auto late = c.attach({::getpid(), 10});
  if (!late) CHECK(late.error().message.find("draining") != std::string::npos);
  d.thread.join();
  CHECK_FALSE(fs::exists(sock));
  CHECK_FALSE(fs::exists(info));
  CHECK_FALSE(fs::exists(ipc::lock_path("ctl-test")));
  CHECK_FALSE(fs::exists(ipc::machine_ledger_path()));   // its only entry went
  std::lock_guard lock(d.log->mutex);
  CHECK(d.log->stopped);
  CHECK(d.log->detached == std::vector<int>{0});
}

TEST_CASE("a draining daemon refuses attach with the draining code and discovery never finds it",
          "[ioserver][control]") {
  InProcessDaemon d;
  auto c = d.client();
  auto a = c.attach({::getpid(), 10});
  REQUIRE(a);
  REQUIRE(ipc::find_daemon_for_model(d.setup.model));
  REQUIRE(c.shutdown(20000));   // drains while our client stays attached
  auto pong = c.ping();
  REQUIRE(pong);
  CHECK((*pong)["draining"] == true);
  auto refused = c.attach({::getpid(), 10});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == ipc::kDrainingCode);
  CHECK(refused.error().message == "waste-ioserver ctl-test is draining (shutting down): attach refused");
  // Hazard: a command starting now must not pick it (its info file went when draining began).
  CHECK_FALSE(ipc::find_daemon_for_model(d.setup.model));
  CHECK_FALSE(fs::exists(ipc::info_path("ctl-test")));
  auto detached = c.detach(lease_of(*a));
  INFO((detached ? std::string("ok") : detached.error().message));
  REQUIRE(detached);
  d.thread.join();   // the last client left: the drain ends at once
  CHECK_FALSE(fs::exists(ipc::socket_path("ctl-test")));
}

TEST_CASE("an auto-exit daemon lingers after its last client, an attach cancels the linger", "[ioserver][control]") {
  InProcessOptions o;
  o.linger = std::chrono::milliseconds(600);
  InProcessDaemon d(o);
  auto c = d.client();
  auto pong = c.ping();
  CHECK((*pong)["auto_exit"] == true);
  CHECK((*pong)["linger_ms"] == 600);
  auto a = c.attach({::getpid(), 10});
  REQUIRE(a);
  // Attached: never exits, however long (several lingers).
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  REQUIRE(c.ping());
  REQUIRE(c.detach(lease_of(*a)));
  // Within the linger a new client keeps it.
  auto b = c.attach({::getpid(), 10});
  REQUIRE(b);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  REQUIRE(c.ping());
  REQUIRE(c.detach(lease_of(*b)));
  d.thread.join();   // exits by itself, linger after the last detach
  CHECK_FALSE(fs::exists(ipc::socket_path("ctl-test")));
  CHECK_FALSE(fs::exists(ipc::info_path("ctl-test")));
  CHECK_FALSE(fs::exists(ipc::lock_path("ctl-test")));
}

TEST_CASE("two containers' daemons stay under one machine cap through the ledger", "[ioserver][control]") {
  test::ScopedRuntimeDir runtime;
  // Size the machine from the plan: the first automatic daemon takes the whole expert set (4
  // records: less than floor + 3 working sets here), which leaves less than a floor for the second.
  std::uint64_t floor = 0, whole = 0;
  {
    test::TempDir probe("probe");
    std::ofstream(probe.path / "manifest.json") << kManifest;
    auto plan = plan_memory(probe.path);
    REQUIRE(plan);
    floor = plan->floor_bytes;
    whole = whole_expert_set_budget(*plan);
    REQUIRE(whole == floor - plan->min_expert_cache_bytes + 4 * plan->max_record_bytes);
  }
  const std::uint64_t m = (whole + 2) / 3;
  const std::uint64_t usable = 4 * m, cap = 3 * m;   // cap = usable - usable/4
  InProcessOptions first_o;
  first_o.instance = "first";
  first_o.usable_ram = usable;
  auto first = std::make_unique<InProcessDaemonIn>(first_o);
  CHECK(first->daemon->info().budget_bytes == whole);
  auto ledger = MachineLedger(ipc::machine_ledger_path()).entries();
  REQUIRE(ledger);
  REQUIRE(ledger->size() == 1);
  CHECK(ledger->front().instance == "first");
  CHECK(ledger->front().budget_bytes == whole);

  const std::string holders = "waste-ioserver first (pid " + std::to_string(::getpid()) + ") for " +
                              first->setup.model.string() + ": " + format_bytes(whole);
  InProcessOptions second_o;
  second_o.instance = "second";
  second_o.usable_ram = usable;
  {
    // Hazard: sized alone against the whole machine, the two would pass the cap together.
    InProcessDaemonIn second(second_o, /*require_ok=*/false);
    REQUIRE_FALSE(second.daemon);
    CHECK(second.init_error.code == Errc::ram_budget);
    CHECK(second.init_error.message == "no room for " + second.setup.model.string() + " under the machine cap " +
                                           format_bytes(cap) + " (3/4 of usable RAM " + format_bytes(usable) +
                                           "): other daemons hold " + format_bytes(whole) + " (" + holders +
                                           "); its floor is " + format_bytes(floor) + ", at most " +
                                           format_bytes(cap - whole) + " is free");
    CHECK_FALSE(fs::exists(ipc::lock_path("second")));
  }
  {
    second_o.budget = floor;   // explicit: refused the same way
    InProcessDaemonIn second(second_o, /*require_ok=*/false);
    REQUIRE_FALSE(second.daemon);
    CHECK(second.init_error.message == "budget " + format_bytes(floor) + " for " + second.setup.model.string() +
                                           " does not fit under the machine cap " + format_bytes(cap) +
                                           ": other daemons hold " + format_bytes(whole) + " (" + holders +
                                           "); at most " + format_bytes(cap - whole) + " is free");
  }
  // The first one gives its budget back: the second fits, sized against what is free.
  first.reset();
  second_o.budget.reset();
  InProcessDaemonIn second(second_o);
  CHECK(second.daemon->info().budget_bytes == whole);
}

TEST_CASE("requests of another protocol version and unknown ops are refused", "[ioserver][control]") {
  InProcessDaemon d;
  auto c = d.client();
  auto old = c.call(json{{"v", 99}, {"op", "ping"}});
  REQUIRE_FALSE(old);
  CHECK(old.error().code == Errc::ipc);
  CHECK(old.error().message == "request uses protocol version 99, this side speaks 2");
  auto unknown = c.call(ipc::make_request("explode"));
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().message == "unknown op 'explode'");
  auto malformed = c.call(ipc::make_request("detach", json{{"client_idx", "zero"}}));
  REQUIRE_FALSE(malformed);
  CHECK(malformed.error().message.rfind("detach: ", 0) == 0);
  REQUIRE(c.ping());   // the daemon is still serving
}

TEST_CASE("a reply sent just before the daemon closes its socket still reaches the client", "[ioserver][control]") {
  // What a daemon does when a detach ends its drain: answer, then close at once. A REQ socket
  // with ZMQ_IMMEDIATE let libzmq drop that arrived-but-unread reply with the pipe.
  test::ScopedRuntimeDir runtime;
  REQUIRE(ipc::ensure_runtime_dir());
  const std::string endpoint = "ipc://" + (ipc::runtime_dir() / "closing.sock").string();
  constexpr int kRounds = 40;
  int answered = 0;
  std::string lost;
  for (int round = 0; round < kRounds; ++round) {
    zmq::context_t ctx(1);
    auto rep = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::rep);
    rep->set(zmq::sockopt::linger, 1000);
    rep->bind(endpoint);
    std::thread server([&] {
      zmq::message_t request;
      if (rep->recv(request)) {
        rep->send(zmq::buffer(ipc::make_ok(nlohmann::json{{"round", round}}).dump()), zmq::send_flags::none);
      }
      rep.reset();   // closes right after the reply, as teardown does
    });
    auto c = ipc::ControlClient::connect(endpoint, std::chrono::milliseconds(3000));
    REQUIRE(c);
    auto reply = c->ping();
    server.join();
    if (reply && (*reply)["round"] == round) ++answered;
    else lost += "round " + std::to_string(round) + ": " + (reply ? reply->dump() : reply.error().message) + "\n";
  }
  INFO(lost);
  CHECK(answered == kRounds);
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
  const auto t0 = std::chrono::steady_clock::now();
  auto c = ipc::ControlClient::connect("ipc://" + stale.string(), std::chrono::milliseconds(500));
  const auto waited = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(c);
  CHECK(c.error().code == Errc::ipc);
  CHECK(c.error().message == "no waste-ioserver listens at " + stale.string() +
                                 " (a stale socket file: its daemon exited without removing it)");
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
  reply.lease.generation = 5;
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

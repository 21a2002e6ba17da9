#include "compute/io/daemon_connect.hpp"

#include <unistd.h>

#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "shared/ipc/control_client.hpp"
#include "shared/ipc/ioserver_launch.hpp"
#include "shared/ipc/process_liveness.hpp"
#include "shared/memory/file_lock.hpp"
#include "shared/memory/memory_plan.hpp"

namespace waste {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::chrono::milliseconds default_linger() {
  if (const char* env = std::getenv("WASTE_LINGER_MS"); env != nullptr && *env != '\0') {
    long long ms = 0;
    const char* end = env + std::strlen(env);
    const auto [ptr, ec] = std::from_chars(env, end, ms);
    if (ec == std::errc() && ptr == end && ms >= 0) return std::chrono::milliseconds(ms);
  }
  return std::chrono::milliseconds(3000);
}

struct DaemonConnection::State {
  ipc::DaemonInfo daemon;
  ipc::AttachReply reply;
  ipc::ClientLease lease;
  bool spawned = false;
  std::mutex mutex;
  std::condition_variable_any wake;
  std::string heartbeat_error;
  std::jthread heartbeat;   // last: stops (and joins) before the rest goes

  void start_heartbeat() {
    heartbeat = std::jthread([this](std::stop_token stop) {
      auto client = ipc::ControlClient::connect(daemon.socket);
      if (client) client->follow_pid(daemon.pid);
      std::unique_lock lock(mutex);
      while (!stop.stop_requested()) {
        wake.wait_for(lock, stop, std::chrono::milliseconds(reply.heartbeat_ms), [] { return false; });
        if (stop.stop_requested()) break;
        lock.unlock();
        Status st = client ? client->heartbeat(reply.client_idx, ::getpid()) : Status(std::unexpected(client.error()));
        lock.lock();
        heartbeat_error = st ? std::string() : st.error().message;
      }
    });
  }

  ~State() {
    heartbeat.request_stop();
    if (heartbeat.joinable()) heartbeat.join();
    if (reply.client_idx < 0) return;
    auto client = ipc::ControlClient::connect(daemon.socket);
    if (!client) return;
    client->follow_pid(daemon.pid);
    // The daemon lives on for the other clients; it exits by itself after its linger.
    (void)client->detach(ipc::DetachRequest{reply.client_idx, ::getpid(), lease.generation});
  }
};

DaemonConnection::DaemonConnection(std::unique_ptr<State> state) : state_(std::move(state)) {}
DaemonConnection::DaemonConnection(DaemonConnection&&) noexcept = default;
DaemonConnection& DaemonConnection::operator=(DaemonConnection&&) noexcept = default;
DaemonConnection::~DaemonConnection() = default;

const ipc::ClientLease& DaemonConnection::lease() const noexcept { return state_->lease; }
const ipc::AttachReply& DaemonConnection::attach_reply() const noexcept { return state_->reply; }
const ipc::DaemonInfo& DaemonConnection::daemon() const noexcept { return state_->daemon; }
bool DaemonConnection::spawned() const noexcept { return state_->spawned; }
std::string DaemonConnection::heartbeat_error() const {
  std::lock_guard lock(state_->mutex);
  return state_->heartbeat_error;
}

namespace {

// Found, or started under the start lock. `spawned` tells which.
Result<ipc::DaemonInfo> find_or_start(const fs::path& model, const std::string& instance, const ConnectOptions& o,
                                      bool& spawned) {
  spawned = false;
  if (auto found = ipc::find_daemon_for_model(model)) return *found;
  if (!o.allow_spawn) return make_error(Errc::ipc, "no waste-ioserver serves " + model.string());
  WASTE_TRY(ipc::ensure_runtime_dir());
  // Held across the spawn: a second command waits here and then finds the first one's daemon.
  auto lock = FileLock::acquire(ipc::start_lock_path(instance), std::chrono::milliseconds(60000),
                                "another command is starting this container's waste-ioserver");
  if (!lock) return std::unexpected(lock.error());
  if (auto found = ipc::find_daemon_for_model(model)) {
    lock->unlink_and_release();
    return *found;
  }
  std::vector<std::string> args{model.string(), "--linger", std::to_string(o.linger.count()), "--remove-log-on-stop"};
  args.insert(args.end(), o.spawn_args.begin(), o.spawn_args.end());
  auto started = ipc::run_ioserver(args, /*quiet_stdout=*/true);
  lock->unlink_and_release();
  if (!started) {
    // Someone outside the start lock (waste-ctl start) won the race: use theirs.
    if (auto found = ipc::find_daemon_for_model(model)) return *found;
    return std::unexpected(ipc::with_log_hint(started.error(), ipc::default_log_path(instance)));
  }
  auto info = ipc::read_daemon_info(ipc::info_path(instance));
  if (!info) return std::unexpected(info.error());
  spawned = true;
  return *info;
}

}  // namespace

Result<DaemonConnection> connect_or_spawn(const fs::path& model_in, const ConnectOptions& o) {
  std::error_code ec;
  const fs::path model = fs::canonical(model_in, ec);
  if (ec) return make_error(Errc::io, model_in.string() + ": " + ec.message());
  auto instance = ipc::instance_for_container(model);
  if (!instance) return std::unexpected(instance.error());
  std::uint64_t state_bytes = o.state_bytes;
  if (state_bytes == 0) {
    auto plan = plan_memory(model);
    if (!plan) return std::unexpected(plan.error());
    state_bytes = plan->client_bytes();
  }
  const auto deadline = Clock::now() + o.discovery_wait;
  for (;;) {
    auto state = std::make_unique<DaemonConnection::State>();
    auto info = find_or_start(model, *instance, o, state->spawned);
    if (!info) return std::unexpected(info.error());
    state->daemon = *info;
    // Start-up vs liveness: a daemon we just spawned, or one younger than the start-up bound,
    // may answer its first request late on a loaded machine: it gets the generous bound while
    // its pid lives. An established daemon gets the short liveness bound.
    const auto age = ipc::process_age(info->pid);
    const bool starting = state->spawned || (age && *age < ipc::kStartupControlTimeout);
    auto client = ipc::ControlClient::connect(info->socket);
    Result<ipc::AttachReply> reply = client ? Result<ipc::AttachReply>(std::unexpected(Error{Errc::ipc, ""}))
                                            : Result<ipc::AttachReply>(std::unexpected(client.error()));
    if (client) {
      client->follow_pid(info->pid);
      const std::uint64_t ticks = ipc::process_start_ticks(::getpid()).value_or(0);
      reply = client->attach(ipc::AttachRequest{::getpid(), state_bytes, ticks},
                             starting ? ipc::kStartupControlTimeout : ipc::kDefaultControlTimeout);
    }
    if (reply) {
      state->reply = *reply;
      state->lease.client_idx = reply->client_idx;
      state->lease.segment_name = reply->arena_segment;
      state->lease.trunk_segment_name = reply->trunk_segment;
      state->lease.generation = reply->lease.generation;
      state->lease.trunk_bytes = reply->lease.trunk_bytes;
      state->lease.pid = reply->lease.pid;
      state->lease.ring_segment_name = reply->lease.ring_segment;
      state->lease.wake_segment_name = reply->lease.wake_segment;
      state->lease.shm_dir = reply->lease.shm_dir;
      state->lease.daemon_pid = reply->daemon_pid;
      state->lease.daemon_log = state->daemon.log;
      state->start_heartbeat();
      return DaemonConnection(std::move(state));
    }
    // Draining (refused, or its info file already gone, or it exited meanwhile): never attach
    // there; look again, and a successor starts once it is gone.
    const bool draining = reply.error().code == ipc::kDrainingCode || !fs::exists(ipc::info_path(info->instance), ec) ||
                          !ipc::process_alive(info->pid, 0);
    if (!draining || Clock::now() >= deadline) {
      if (state->spawned) return std::unexpected(ipc::with_log_hint(reply.error(), state->daemon.log));
      return std::unexpected(reply.error());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Result<DaemonConnection> connect_or_spawn(const fs::path& model, bool allow_spawn, std::uint64_t state_bytes,
                                          const std::vector<std::string>& spawn_args) {
  ConnectOptions o;
  o.allow_spawn = allow_spawn;
  o.state_bytes = state_bytes;
  o.spawn_args = spawn_args;
  return connect_or_spawn(model, o);
}

}  // namespace waste

#include "compute/io/daemon_connect.hpp"

#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "shared/ipc/control_client.hpp"
#include "shared/ipc/ioserver_launch.hpp"
#include "shared/ipc/process_liveness.hpp"
#include "shared/memory/memory_plan.hpp"

namespace waste {

struct DaemonConnection::State {
  ipc::DaemonInfo daemon;
  ipc::AttachReply reply;
  ipc::ClientLease lease;
  bool private_daemon = false;
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
    auto client = ipc::ControlClient::connect(daemon.socket);
    if (!client) return;
    client->follow_pid(daemon.pid);
    if (reply.client_idx >= 0) (void)client->detach(reply.client_idx);
    if (private_daemon) {
      (void)client->shutdown(0);
      ipc::wait_process_gone(daemon.pid, 3000);
    }
  }
};

DaemonConnection::DaemonConnection(std::unique_ptr<State> state) : state_(std::move(state)) {}
DaemonConnection::DaemonConnection(DaemonConnection&&) noexcept = default;
DaemonConnection& DaemonConnection::operator=(DaemonConnection&&) noexcept = default;
DaemonConnection::~DaemonConnection() = default;

const ipc::ClientLease& DaemonConnection::lease() const noexcept { return state_->lease; }
const ipc::AttachReply& DaemonConnection::attach_reply() const noexcept { return state_->reply; }
const ipc::DaemonInfo& DaemonConnection::daemon() const noexcept { return state_->daemon; }
bool DaemonConnection::private_daemon() const noexcept { return state_->private_daemon; }
std::string DaemonConnection::heartbeat_error() const {
  std::lock_guard lock(state_->mutex);
  return state_->heartbeat_error;
}

Result<DaemonConnection> connect_or_spawn(const std::filesystem::path& model, bool allow_private,
                                          std::uint64_t state_bytes,
                                          const std::vector<std::string>& private_args) {
  auto state = std::make_unique<DaemonConnection::State>();
  if (auto found = ipc::find_daemon_for_model(model)) {
    state->daemon = *found;
  } else {
    if (!allow_private) return make_error(Errc::ipc, "no waste-ioserver serves " + model.string());
    const std::string instance = "private-" + std::to_string(::getpid());
    std::error_code ec;
    const auto absolute = std::filesystem::absolute(model, ec);
    // A private daemon leaves no log behind when it stops cleanly; a failed one keeps it.
    std::vector<std::string> args{absolute.string(), "--name", instance, "--remove-log-on-stop"};
    args.insert(args.end(), private_args.begin(), private_args.end());
    if (auto started = ipc::run_ioserver(args, /*quiet_stdout=*/true); !started) {
      return std::unexpected(ipc::with_log_hint(started.error(), ipc::default_log_path(instance)));
    }
    auto info = ipc::read_daemon_info(ipc::info_path(instance));
    if (!info) return std::unexpected(info.error());
    state->daemon = *info;
    state->private_daemon = true;
  }
  if (state_bytes == 0) {
    auto plan = plan_memory(model);
    if (!plan) return std::unexpected(plan.error());
    state_bytes = plan->client_bytes();
  }
  auto client = ipc::ControlClient::connect(state->daemon.socket);
  if (!client) return std::unexpected(client.error());
  // Start-up vs liveness: a daemon we just spawned, or one younger than the start-up bound
  // (another process may have just started it, e.g. `waste bench --clients`), may answer its
  // first request late on a loaded machine: it gets the generous bound while its pid lives.
  // An established daemon gets the short liveness bound. Either way a dead one fails at once.
  client->follow_pid(state->daemon.pid);
  const auto age = ipc::process_age(state->daemon.pid);
  const bool starting = state->private_daemon || (age && *age < ipc::kStartupControlTimeout);
  auto reply = client->attach(ipc::AttachRequest{::getpid(), state_bytes},
                              starting ? ipc::kStartupControlTimeout : ipc::kDefaultControlTimeout);
  if (!reply) {   // State's destructor stops a private daemon
    if (state->private_daemon) return std::unexpected(ipc::with_log_hint(reply.error(), state->daemon.log));
    return std::unexpected(reply.error());
  }
  state->reply = *reply;
  state->lease.client_idx = reply->client_idx;
  state->lease.segment_name = reply->arena_segment;
  state->lease.trunk_segment_name = reply->trunk_segment;
  state->lease.generation = reply->lease.value("generation", std::uint64_t{0});
  state->lease.trunk_bytes = reply->lease.value("trunk_bytes", std::uint64_t{0});
  state->lease.pid = reply->lease.value("pid", 0);
  state->lease.ring_segment_name = reply->lease.value("ring_segment", std::string());
  state->lease.wake_segment_name = reply->lease.value("wake_segment", std::string());
  state->lease.shm_dir = reply->lease.value("shm_dir", std::string());
  state->lease.daemon_pid = reply->daemon_pid;
  state->lease.daemon_log = state->daemon.log;
  state->start_heartbeat();
  return DaemonConnection(std::move(state));
}

}  // namespace waste

#include "compute/io/daemon_attach.hpp"

#include <unistd.h>

#include "compute/io/daemon_expert_source.hpp"
#include "compute/io/shared_trunk.hpp"
#include "shared/container/container.hpp"
#include "shared/ipc/control_client.hpp"
#include "shared/ipc/ioserver_launch.hpp"
#include "shared/ipc/runtime_dir.hpp"

namespace waste {

Result<DaemonAttachment> attach_daemon(const std::filesystem::path& model, const ConnectOptions& options) {
  auto info = ContainerInfo::open(model);
  if (!info) return std::unexpected(info.error());
  DaemonAttachment out;
  auto connection = connect_or_spawn(model, options);
  if (!connection) return std::unexpected(connection.error());
  out.connection = std::make_unique<DaemonConnection>(std::move(*connection));
  auto source = open_daemon_source(out.connection->lease(), info->geometry, model);
  if (!source) return std::unexpected(source.error());
  out.source = std::move(*source);
  auto trunk = open_daemon_trunk(out.connection->lease(), model, info->manifest);
  if (!trunk) return std::unexpected(trunk.error());
  out.trunk = std::move(*trunk);
  return out;
}

Result<BenchDaemon> BenchDaemon::start(const std::filesystem::path& model, const std::string& budget, int clients,
                                       const std::vector<std::string>& extra_args) {
  BenchDaemon d;
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(model, ec);
  if (auto found = ipc::find_daemon_for_model(absolute)) {
    d.socket_ = found->socket;
    d.instance_ = found->instance;
    d.pid_ = found->pid;
    d.budget_bytes_ = found->budget_bytes;
    d.arena_slots_ = found->arena_slots;
    return d;
  }
  d.instance_ = "bench-" + std::to_string(::getpid());
  std::vector<std::string> args{absolute.string(), "--name", d.instance_, "--reserve-clients", std::to_string(clients),
                                "--remove-log-on-stop"};
  if (!budget.empty()) {
    args.push_back("--budget");
    args.push_back(budget);
  }
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  if (auto started = ipc::run_ioserver(args, /*quiet_stdout=*/true); !started) {
    return std::unexpected(ipc::with_log_hint(started.error(), ipc::default_log_path(d.instance_)));
  }
  auto info = ipc::read_daemon_info(ipc::info_path(d.instance_));
  if (!info) return std::unexpected(info.error());
  d.owned_ = true;
  d.socket_ = info->socket;
  d.pid_ = info->pid;
  d.budget_bytes_ = info->budget_bytes;
  d.arena_slots_ = info->arena_slots;
  return d;
}

BenchDaemon::BenchDaemon(BenchDaemon&& o) noexcept
    : socket_(std::move(o.socket_)), instance_(std::move(o.instance_)), pid_(o.pid_), budget_bytes_(o.budget_bytes_),
      arena_slots_(o.arena_slots_), owned_(std::exchange(o.owned_, false)) {}

BenchDaemon& BenchDaemon::operator=(BenchDaemon&& o) noexcept {
  if (this != &o) {
    (void)stop();
    socket_ = std::move(o.socket_);
    instance_ = std::move(o.instance_);
    pid_ = o.pid_;
    budget_bytes_ = o.budget_bytes_;
    arena_slots_ = o.arena_slots_;
    owned_ = std::exchange(o.owned_, false);
  }
  return *this;
}

BenchDaemon::~BenchDaemon() { (void)stop(); }

Result<nlohmann::json> BenchDaemon::stats() const {
  auto client = ipc::ControlClient::connect(socket_);
  if (!client) return std::unexpected(client.error());
  return client->stats();
}

Status BenchDaemon::stop() {
  if (!owned_) return {};
  owned_ = false;
  auto client = ipc::ControlClient::connect(socket_);
  if (!client) return std::unexpected(client.error());
  client->follow_pid(pid_);
  WASTE_TRY(client->shutdown(2000));
  if (!ipc::wait_process_gone(pid_, 5000)) {
    return make_error(Errc::ipc, "waste-ioserver " + instance_ + " (pid " + std::to_string(pid_) + ") did not exit");
  }
  return {};
}

Status attach_daemon(const std::filesystem::path& model, std::unique_ptr<DaemonConnection>& slot,
                     const std::vector<std::string>& spawn_args, int linger_ms) {
  ConnectOptions o;
  o.spawn_args = spawn_args;
  if (linger_ms >= 0) o.linger = std::chrono::milliseconds(linger_ms);
  std::error_code ec;
  auto connection = connect_or_spawn(std::filesystem::absolute(model, ec), o);
  if (!connection) return std::unexpected(connection.error());
  slot = std::make_unique<DaemonConnection>(std::move(*connection));
  return {};
}

void detach_daemon(std::unique_ptr<DaemonConnection>& slot) { slot.reset(); }

const ipc::ClientLease& lease_of(const DaemonConnection& connection) { return connection.lease(); }
pid_t daemon_pid_of(const DaemonConnection& connection) { return connection.daemon().pid; }
std::uint64_t daemon_budget_of(const DaemonConnection& connection) { return connection.daemon().budget_bytes; }
std::uint64_t daemon_arena_slots_of(const DaemonConnection& connection) { return connection.daemon().arena_slots; }

Result<std::unique_ptr<ExpertSource>> open_daemon_source(const ipc::ClientLease& lease, const ExpertGeometry& geometry,
                                                         const std::filesystem::path& container) {
  auto source = DaemonExpertSource::open(lease, geometry, DaemonExpertSource::OpenOptions{container});
  if (!source) return std::unexpected(source.error());
  return std::unique_ptr<ExpertSource>(std::move(*source));
}

Result<std::shared_ptr<const Trunk>> open_daemon_trunk(const ipc::ClientLease& lease,
                                                       const std::filesystem::path& model, const Manifest& manifest) {
  if (lease.trunk_segment_name.empty()) return std::shared_ptr<const Trunk>{};  // the engine loads its own
  auto trunk = open_shared_trunk(lease, model, manifest);
  if (!trunk) return std::unexpected(trunk.error());
  return std::make_shared<const Trunk>(std::move(*trunk));
}

}  // namespace waste

#include "cli/bench/bench_daemon.hpp"

#include <unistd.h>

#include "shared/ipc/control_client.hpp"
#include "shared/ipc/ioserver_launch.hpp"
#include "shared/ipc/runtime_dir.hpp"

namespace waste::cli::bench {

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
  // No background fill: a benchmark measures the reads its own trace or clients cause.
  std::vector<std::string> args{absolute.string(), "--name", d.instance_, "--reserve-clients", std::to_string(clients),
                                "--remove-log-on-stop", "--fill", "off"};
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

}  // namespace waste::cli::bench

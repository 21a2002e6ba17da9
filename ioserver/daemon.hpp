// waste-ioserver's lifecycle: one daemon per container.
//   resolve_setup  plan + budget + instance name; refuse a live twin, clean a crashed one's files
//   Daemon::init   block signals (signalfd), create the data plane, bind the control socket
//                  (0600), write the info file
//   run            the poll loop: control requests, signals, and every 200 ms reclaim clients
//                  whose process died (pid + start time; never for a late heartbeat); an
//                  auto-exit daemon (--linger) drains `linger` after its last client left
//   reconfigure    policy / budget (within limits) at run time
//   stop           thread-safe; the loop drains, detaches everyone, removes shm, socket, info
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ioserver/control/client_registry.hpp"
#include "ioserver/control/data_plane.hpp"
#include "ioserver/io_server_config.hpp"
#include "shared/ipc/peer_credentials.hpp"
#include "shared/ipc/protocol.hpp"
#include "shared/ipc/runtime_dir.hpp"
#include "shared/memory/budget.hpp"
#include "shared/memory/budget_ledger.hpp"
#include "shared/memory/file_lock.hpp"
#include "shared/memory/memory_plan.hpp"
#include "shared/memory/ram.hpp"
#include "shared/result.hpp"

namespace spdlog {
class logger;
}

namespace waste::ioserver {

// The daemon's options: the data plane's (one IoServerConfig; Daemon::init fills in the
// canonical container, the instance and arena_slots) plus what only the daemon has. The
// command-line form of all of them is add_daemon_options (ioserver/control/daemon_cli.hpp),
// shared by waste-ioserver and `waste-ctl start`.
struct DaemonOptions {
  IoServerConfig io;                           // io.container = MODEL, io.instance: empty = derived
  std::optional<std::uint64_t> budget_bytes;   // nullopt = automatic
  int reserved_clients = 1;                    // clients whose state the budget must hold
  bool remove_log_on_clean_stop = false;       // auto daemons: no log left behind unless they fail
  // Auto-exit (the daemon a `waste` command starts): drain this long after the last client
  // detached or was reclaimed; before the first attach, after max(linger, first_attach_grace).
  // nullopt: stay until stopped (`waste-ctl start`).
  std::optional<std::chrono::milliseconds> linger;
  std::chrono::milliseconds first_attach_grace{10000};
  // How long set-up waits for a predecessor of the same instance to finish its teardown.
  std::chrono::milliseconds predecessor_wait{10000};
  std::filesystem::path log_file;              // empty = <runtime dir>/waste-<instance>.log
  bool log_to_stderr = true;
  bool handle_signals = true;                  // false in in-process tests
  std::optional<UsableRam> ram;                // nullopt = this machine (tests pin it)
};

// Everything decided before the daemon forks: what to serve and with how much memory.
struct DaemonSetup {
  DaemonOptions options;
  std::filesystem::path model;       // canonical
  std::string instance;
  MemoryPlan plan;                   // with the floor raised for reserved_clients
  BudgetChoice budget;
  std::uint64_t arena_slots = 0;
  std::vector<std::string> cleaned;  // stale files removed (crashed predecessor)
  UsableRam ram;                     // what the machine cap is taken from
  // The instance's lifetime lock (ipc::lock_path), held until teardown ends. Shared so a
  // setup stays copyable; teardown releases it whoever else holds the pointer.
  std::shared_ptr<FileLock> instance_lock;
};

// Errors: Errc::ram_budget (below floor), Errc::ipc ("waste-ioserver for INSTANCE is already
// running (pid N)"), Errc::io / Errc::format for the container. Waits (options.predecessor_wait)
// for a predecessor that still holds the instance lock while it drains.
// Daemon::init then registers the budget in the machine ledger (an automatic budget is sized
// there against what the other daemons hold), which may refuse it (Errc::ram_budget).
Result<DaemonSetup> resolve_setup(const DaemonOptions& options);

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> init(DaemonSetup setup, const DataPlaneFactory& factory);
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon();

  Status run();
  Status reconfigure(const ipc::ConfigRequest& request);
  void stop() noexcept;   // any thread, signal-safe: writes an eventfd

  [[nodiscard]] const ipc::DaemonInfo& info() const noexcept { return info_; }
  [[nodiscard]] std::shared_ptr<spdlog::logger> logger() const { return log_; }

 private:
  explicit Daemon(DaemonSetup setup);
  // `peer`: the requester as the kernel names it (SO_PEERCRED through libzmq); nullopt when unknown.
  nlohmann::json handle(const std::string& text, const std::optional<ipc::PeerCredentials>& peer);
  nlohmann::json handle_attach(const nlohmann::json& body, const std::optional<ipc::PeerCredentials>& peer);
  nlohmann::json handle_detach(const nlohmann::json& body);
  nlohmann::json handle_heartbeat(const nlohmann::json& body);
  nlohmann::json handle_stats() const;
  nlohmann::json handle_config(const nlohmann::json& body);
  nlohmann::json handle_shutdown(const nlohmann::json& body);
  void reclaim();
  void drop_client(int client_idx, const char* why);
  void begin_drain(std::chrono::milliseconds drain);
  void check_linger(std::chrono::steady_clock::time_point now);
  Status apply_cache_slots();
  // Automatic budgets follow their clients: an attach that does not fit raises the budget by
  // its state (through the machine ledger, never past the cap); detaches give it back.
  [[nodiscard]] std::uint64_t budget_for(std::uint64_t extra_state) const noexcept;
  void grow_budget_for(std::uint64_t state_bytes);
  void shrink_budget_to_clients();
  void teardown() noexcept;

  DaemonSetup setup_;
  ipc::DaemonInfo info_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<DataPlane> plane_;
  BudgetLedger ledger_;
  ClientRegistry clients_;
  std::string policy_;
  struct Sockets;                    // ZeroMQ context and REP socket
  std::unique_ptr<Sockets> sockets_;
  int signal_fd_ = -1;
  int wake_fd_ = -1;
  bool draining_ = false;
  std::chrono::steady_clock::time_point drain_deadline_{};
  std::chrono::steady_clock::time_point idle_since_{};   // last moment the client count became 0
  bool ever_attached_ = false;
  std::uint64_t cache_slots_ = 0;                        // what the data plane was last told
  std::uint64_t base_budget_ = 0;                        // the start (or configured) budget
  bool registered_ = false;                              // in the machine ledger
  bool clean_stop_ = false;                              // run() ended normally: the log may go
  bool torn_down_ = false;
};

}  // namespace waste::ioserver

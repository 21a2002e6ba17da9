// waste-ioserver's lifecycle: one daemon per container.
//   resolve_setup  plan + budget + instance name; refuse a live twin, clean a crashed one's files
//                  (setup.hpp)
//   Daemon::init   block signals (signalfd), create the data plane, bind the control socket
//                  (0600), write the info file
//   run            the poll loop: control requests, signals, and every 200 ms reclaim clients
//                  whose process died (pid + start time; never for a late heartbeat); an
//                  auto-exit daemon (--linger) drains `linger` after its last client left
//   reconfigure    policy / budget (within limits) at run time
//   stop           thread-safe; the loop drains, detaches everyone, removes shm, socket, info
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ioserver/control/client_registry.hpp"
#include "ioserver/control/data_plane.hpp"
#include "ioserver/daemon/setup.hpp"
#include "shared/ipc/peer_credentials.hpp"
#include "shared/ipc/protocol.hpp"
#include "shared/ipc/runtime_dir.hpp"
#include "shared/memory/budget_ledger.hpp"
#include "shared/result.hpp"

namespace spdlog {
class logger;
}

namespace waste::ioserver {

struct ControlSocket;   // ioserver/control/control_socket.hpp

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
  // The control protocol's handlers (ioserver/control/control_protocol.cpp).
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
  // Automatic budgets follow their clients (machine_budget.cpp): an attach that does not fit raises the budget by
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
  std::unique_ptr<ControlSocket> sockets_;   // ZeroMQ context and REP socket
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

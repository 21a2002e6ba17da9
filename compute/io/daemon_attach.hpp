// Opening a model through waste-ioserver, for every caller in the library (Engine::open with
// EngineOptions::daemon, `waste run/chat/eval/bench`, later `waste serve`, tests):
//   attach_daemon        connection (found or started, see daemon_connect.hpp) + the
//                        shared-memory expert source + the shared trunk, in one value
//   open_daemon_source   DaemonExpertSource over a lease
//   open_daemon_trunk    the Trunk over the daemon's shared trunk image
//   BenchDaemon          a daemon one benchmark starts for itself under "bench-PID" and stops
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/expert_source.hpp"
#include "compute/io/daemon_connect.hpp"
#include "shared/container/expert_record.hpp"
#include "shared/container/manifest.hpp"
#include "shared/container/trunk.hpp"
#include "shared/ipc/client_lease.hpp"
#include "shared/result.hpp"

namespace waste {

// What an engine reads through: destroy the source and trunk (the engine) before the connection.
struct DaemonAttachment {
  std::unique_ptr<DaemonConnection> connection;
  std::unique_ptr<ExpertSource> source;
  std::shared_ptr<const Trunk> trunk;   // null when the daemon shares no trunk (load your own)
};

// Attach (or start the container's daemon) and map its arena and trunk for `model`.
Result<DaemonAttachment> attach_daemon(const std::filesystem::path& model, const ConnectOptions& options);

// Attach into `slot` only (the CLI's OpenEngine keeps the connection beside the engine).
// linger_ms: of a daemon this starts (-1 = default_linger()).
Status attach_daemon(const std::filesystem::path& model, std::unique_ptr<DaemonConnection>& slot,
                     const std::vector<std::string>& spawn_args = {}, int linger_ms = -1);
void detach_daemon(std::unique_ptr<DaemonConnection>& slot);
const ipc::ClientLease& lease_of(const DaemonConnection& connection);
pid_t daemon_pid_of(const DaemonConnection& connection);
// The daemon's budget and arena size (from its info file).
std::uint64_t daemon_budget_of(const DaemonConnection& connection);
std::uint64_t daemon_arena_slots_of(const DaemonConnection& connection);

// `container`, when given, must be the daemon's container (checked by identity at open).
Result<std::unique_ptr<ExpertSource>> open_daemon_source(const ipc::ClientLease& lease, const ExpertGeometry& geometry,
                                                         const std::filesystem::path& container = {});
Result<std::shared_ptr<const Trunk>> open_daemon_trunk(const ipc::ClientLease& lease,
                                                       const std::filesystem::path& model, const Manifest& manifest);

// A daemon the benchmark started for one container (instance "bench-PID") with a given budget
// and client reservation; shut down (drained) when destroyed: the benchmark started it by hand.
// When a daemon already serves the container, `start` returns one that is not owned (its
// budget wins) and never stops it.
class BenchDaemon {
 public:
  // `extra_args` go to waste-ioserver as given ("--policy", "lru"); unused when one already serves.
  static Result<BenchDaemon> start(const std::filesystem::path& model, const std::string& budget, int clients,
                                   const std::vector<std::string>& extra_args = {});
  BenchDaemon(BenchDaemon&&) noexcept;
  BenchDaemon& operator=(BenchDaemon&&) noexcept;
  ~BenchDaemon();
  [[nodiscard]] bool owned() const { return owned_; }
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] const std::string& instance() const { return instance_; }
  [[nodiscard]] std::uint64_t budget_bytes() const { return budget_bytes_; }
  [[nodiscard]] std::uint64_t arena_slots() const { return arena_slots_; }
  // The daemon's `stats` reply.
  [[nodiscard]] Result<nlohmann::json> stats() const;
  Status stop();

 private:
  BenchDaemon() = default;
  std::string socket_, instance_;
  pid_t pid_ = 0;
  std::uint64_t budget_bytes_ = 0, arena_slots_ = 0;
  bool owned_ = false;
};

}  // namespace waste

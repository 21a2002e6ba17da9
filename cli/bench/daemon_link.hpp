// The CLI's way to waste-ioserver, split by plane: this header includes neither the control
// protocol nor the shared-memory layout, so commands stay free of both.
//   daemon_control.cpp  start/stop a bench-owned daemon, stats, attach (protocol side)
//   daemon_source.cpp   DaemonExpertSource and the shared trunk over a lease (shm side)
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/expert_source.hpp"
#include "shared/container/expert_record.hpp"
#include "shared/container/manifest.hpp"
#include "shared/container/trunk.hpp"
#include "shared/ipc/client_lease.hpp"
#include "shared/result.hpp"

namespace waste {
class DaemonConnection;
}

namespace waste::cli::bench {

// A daemon the benchmark started for one container (under instance "bench-PID") with a given
// budget and client count; shut down (drained) when destroyed. When a daemon already serves the
// container, `start` attaches to nothing and returns one that is not owned (its budget wins).
class BenchDaemon {
 public:
  static Result<BenchDaemon> start(const std::filesystem::path& model, const std::string& budget, int clients);
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

// Attach to the daemon serving `model` (a private one is started when none does) into `slot`
// (OpenEngine::daemon). DaemonConnection is incomplete here, hence the slot, and detach_daemon
// to drop it from files that cannot see its definition.
Status attach_daemon(const std::filesystem::path& model, std::unique_ptr<DaemonConnection>& slot,
                     const std::vector<std::string>& private_args = {});
void detach_daemon(std::unique_ptr<DaemonConnection>& slot);
const ipc::ClientLease& lease_of(const DaemonConnection& connection);
pid_t daemon_pid_of(const DaemonConnection& connection);
// The daemon's budget and arena size (from its info file).
std::uint64_t daemon_budget_of(const DaemonConnection& connection);
std::uint64_t daemon_arena_slots_of(const DaemonConnection& connection);

// Data plane over a lease (daemon_source.cpp).
Result<std::unique_ptr<ExpertSource>> open_daemon_source(const ipc::ClientLease& lease, const ExpertGeometry& geometry);
Result<std::shared_ptr<const Trunk>> open_daemon_trunk(const ipc::ClientLease& lease,
                                                       const std::filesystem::path& model, const Manifest& manifest);

}  // namespace waste::cli::bench

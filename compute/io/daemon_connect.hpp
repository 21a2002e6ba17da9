// The compute side's way in to waste-ioserver: find the daemon that serves a container (or
// start the container's shareable one), attach with this process's declared state bytes, and
// heartbeat until destroyed. The ClientLease is what DaemonExpertSource maps.
//
// A started daemon is nobody's: it runs under the container's default instance name with
// auto-exit (`--linger`), so any number of commands share it and it exits `linger` after the
// last one detaches or dies. No client ever sends it `shutdown`.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "shared/ipc/client_lease.hpp"
#include "shared/ipc/protocol.hpp"
#include "shared/ipc/runtime_dir.hpp"
#include "shared/result.hpp"

namespace waste {

// Default linger of a daemon a command starts: $WASTE_LINGER_MS, else 3000 ms.
std::chrono::milliseconds default_linger();

struct ConnectOptions {
  bool allow_spawn = true;                  // start the container's daemon when none serves it
  std::uint64_t state_bytes = 0;            // what this process holds itself (0 = the plan's state + scratch)
  std::vector<std::string> spawn_args;      // extra waste-ioserver flags for a daemon we start (--budget, ...)
  std::chrono::milliseconds linger = default_linger();
  // How long discovery keeps trying while the daemon it found is draining (and a successor
  // waits for it to go).
  std::chrono::milliseconds discovery_wait{20000};
};

class DaemonConnection {
 public:
  DaemonConnection(DaemonConnection&&) noexcept;
  DaemonConnection& operator=(DaemonConnection&&) noexcept;
  // Stops the heartbeat and detaches ({index, pid, generation}); never stops the daemon.
  ~DaemonConnection();

  [[nodiscard]] const ipc::ClientLease& lease() const noexcept;
  [[nodiscard]] const ipc::AttachReply& attach_reply() const noexcept;
  [[nodiscard]] const ipc::DaemonInfo& daemon() const noexcept;
  // This connection started the daemon (its --budget/--verify/... applied).
  [[nodiscard]] bool spawned() const noexcept;
  // The last heartbeat error ("client 3 ... is not attached (reclaimed?)"); empty while healthy.
  [[nodiscard]] std::string heartbeat_error() const;

  struct State;
  explicit DaemonConnection(std::unique_ptr<State> state);

 private:
  std::unique_ptr<State> state_;
};

// Attach to the daemon serving `model`; when none does (and allow_spawn), start the
// container's shareable daemon under a per-instance start lock (two commands starting at once
// end with one daemon, both attached). A daemon found draining is never attached to: discovery
// retries until it is gone and a successor serves (up to discovery_wait).
// Errors: Errc::ipc ("no waste-ioserver serves M"), Errc::ram_budget (attach refused), ...
Result<DaemonConnection> connect_or_spawn(const std::filesystem::path& model, const ConnectOptions& options);
// The same with the older argument list.
Result<DaemonConnection> connect_or_spawn(const std::filesystem::path& model, bool allow_spawn,
                                          std::uint64_t state_bytes = 0,
                                          const std::vector<std::string>& spawn_args = {});

}  // namespace waste

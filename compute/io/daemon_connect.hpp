// The compute side's way in to waste-ioserver: find the daemon that serves a container (or
// start a private one), attach with this process's declared state bytes, and heartbeat until
// destroyed. The ClientLease is what DaemonExpertSource maps.
#pragma once

#include <filesystem>
#include <string>
#include <vector>
#include <memory>
#include <string>

#include "shared/ipc/client_lease.hpp"
#include "shared/ipc/protocol.hpp"
#include "shared/ipc/runtime_dir.hpp"
#include "shared/result.hpp"

namespace waste {

class DaemonConnection {
 public:
  DaemonConnection(DaemonConnection&&) noexcept;
  DaemonConnection& operator=(DaemonConnection&&) noexcept;
  // Stops the heartbeat, detaches, and shuts a private daemon down.
  ~DaemonConnection();

  [[nodiscard]] const ipc::ClientLease& lease() const noexcept;
  [[nodiscard]] const ipc::AttachReply& attach_reply() const noexcept;
  [[nodiscard]] const ipc::DaemonInfo& daemon() const noexcept;
  [[nodiscard]] bool private_daemon() const noexcept;
  // The last heartbeat error ("client 3 ... is not attached (reclaimed?)"); empty while healthy.
  [[nodiscard]] std::string heartbeat_error() const;

  struct State;
  explicit DaemonConnection(std::unique_ptr<State> state);

 private:
  std::unique_ptr<State> state_;
};

// If a daemon serves `model`, attach to it; else, when allow_private, start one with the
// default (automatic) budget under a private instance name, stopped again with the connection.
// state_bytes: what this process holds itself (0 = the container's plan: state + scratch).
// Errors: Errc::ipc ("no waste-ioserver serves M"), Errc::ram_budget (attach refused), ...
// private_args: extra waste-ioserver flags for a private daemon (--budget, --verify, ...).
Result<DaemonConnection> connect_or_spawn(const std::filesystem::path& model, bool allow_private,
                                          std::uint64_t state_bytes = 0,
                                          const std::vector<std::string>& private_args = {});

}  // namespace waste

// Opening a model's experts through waste-ioserver (what open_expert_plane in
// compute/api/engine_open.hpp does on the daemon path):
//   attach_daemon        connection (found or started, see daemon_connect.hpp) + the
//                        shared-memory expert source + the shared trunk, in one value
//   open_daemon_source   DaemonExpertSource over a lease
//   open_daemon_trunk    the Trunk over the daemon's shared trunk image
//   open_daemon_engram_rows  the Engram rows from the daemon's page pool, on a second lease
#pragma once

#include <filesystem>
#include <memory>

#include "compute/engram/engram_layout.hpp"
#include "compute/engram/engram_rows.hpp"
#include "compute/expert_source.hpp"
#include "compute/io/daemon_connect.hpp"
#include "shared/container/container.hpp"
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

// Attach (or start the container's daemon) and map its arena and trunk for `model`, whose
// description `container` is (read once by the caller; its geometry and manifest are used, and
// the daemon's container is checked to be `model` by identity).
Result<DaemonAttachment> attach_daemon(const std::filesystem::path& model, const ContainerInfo& container,
                                       const ConnectOptions& options);

// DeepSeek-V4.1's Engram rows from the daemon serving `model`: a second connection (never a
// spawn; the rings are single-producer, single-consumer, so the expert source's lease cannot be
// shared) declaring no state of its own, and DaemonEngramRows over its lease. The reader owns the
// connection (destroyed after it). Errors: the attach's, or DaemonEngramRows::open's (a daemon
// without these tables).
Result<std::unique_ptr<engram::EngramRowReader>> open_daemon_engram_rows(const std::filesystem::path& model,
                                                                         const engram::EngramLayout& layout,
                                                                         const ConnectOptions& options);

// `container`, when given, must be the daemon's container (checked by identity at open).
Result<std::unique_ptr<ExpertSource>> open_daemon_source(const ipc::ClientLease& lease, const ExpertGeometry& geometry,
                                                         const std::filesystem::path& container = {});
Result<std::shared_ptr<const Trunk>> open_daemon_trunk(const ipc::ClientLease& lease,
                                                       const std::filesystem::path& model, const Manifest& manifest);

}  // namespace waste

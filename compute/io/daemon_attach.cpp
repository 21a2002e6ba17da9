#include "compute/io/daemon_attach.hpp"

#include "compute/io/daemon_expert_source.hpp"
#include "compute/io/shared_trunk.hpp"

namespace waste {

Result<DaemonAttachment> attach_daemon(const std::filesystem::path& model, const ContainerInfo& container,
                                       const ConnectOptions& options) {
  DaemonAttachment out;
  auto connection = connect_or_spawn(model, options);
  if (!connection) return std::unexpected(connection.error());
  out.connection = std::make_unique<DaemonConnection>(std::move(*connection));
  auto source = open_daemon_source(out.connection->lease(), container.geometry, model);
  if (!source) return std::unexpected(source.error());
  out.source = std::move(*source);
  auto trunk = open_daemon_trunk(out.connection->lease(), model, container.manifest);
  if (!trunk) return std::unexpected(trunk.error());
  out.trunk = std::move(*trunk);
  return out;
}

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

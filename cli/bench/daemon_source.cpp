// Data-plane side of daemon_link.hpp (see there for why it is its own file).
#include "cli/bench/daemon_link.hpp"
#include "compute/io/daemon_expert_source.hpp"
#include "compute/io/shared_trunk.hpp"

namespace waste::cli::bench {

Result<std::unique_ptr<ExpertSource>> open_daemon_source(const ipc::ClientLease& lease, const ExpertGeometry& geometry) {
  auto source = DaemonExpertSource::open(lease, geometry);
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

}  // namespace waste::cli::bench

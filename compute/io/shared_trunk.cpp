#include "compute/io/shared_trunk.hpp"

#include "compute/io/daemon_expert_source.hpp"

namespace waste {

Result<Trunk> open_shared_trunk(const ipc::ClientLease& lease, const std::filesystem::path& container_dir,
                                const Manifest& manifest) {
  auto mapped = map_trunk_segment(lease);
  if (!mapped) return std::unexpected(mapped.error());
  const TrunkLayout layout = TrunkLayout::plan(manifest);
  if (mapped->image.size() < layout.image_bytes) {
    return make_error(Errc::ipc, "trunk segment " + lease.trunk_segment_name + " holds " +
                                     std::to_string(mapped->image.size()) + " bytes, the manifest plans " +
                                     std::to_string(layout.image_bytes) + " (different container?)");
  }
  return Trunk::open(container_dir, manifest, mapped->image, mapped->keep_alive);
}

}  // namespace waste

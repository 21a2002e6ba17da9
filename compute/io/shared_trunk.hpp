// Build a Trunk on the daemon's shared trunk segment, so N clients of one waste-ioserver cost one
// resident trunk. The layout is recomputed from the manifest (TrunkLayout::plan is deterministic),
// and the segment size must match it.
#pragma once

#include <filesystem>

#include "shared/container/manifest.hpp"
#include "shared/container/trunk.hpp"
#include "shared/ipc/client_lease.hpp"
#include "shared/result.hpp"

namespace waste {

Result<Trunk> open_shared_trunk(const ipc::ClientLease& lease, const std::filesystem::path& container_dir,
                                const Manifest& manifest);

}  // namespace waste

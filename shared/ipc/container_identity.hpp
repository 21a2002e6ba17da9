// The identity of a container's files (path, inode, size, mtime of manifest, trunk, codebooks and
// every expert bank), as the daemon publishes it in the arena header and a client checks it at
// open: a client never uses the records of a container other than the one it opened.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "shared/result.hpp"

namespace waste::ipc {

struct ContainerFileIdentity {
  std::string name;  // file name inside the container directory
  std::uint64_t name_hash = 0;
  std::uint64_t inode = 0, device = 0, size = 0;
  std::int64_t mtime_ns = 0;
};

struct ContainerIdentity {
  std::filesystem::path canonical;  // the container directory, canonical
  std::uint64_t path_hash = 0;      // fnv1a64(canonical)
  std::vector<ContainerFileIdentity> files;  // in a fixed order; absent optional files left out
};

// Stats manifest.json, trunk.bin, codebooks.bin and experts-L<l>.bin for l < n_layers (those
// that exist). Errors: the directory or its manifest cannot be stat'ed (named).
Result<ContainerIdentity> container_identity(const std::filesystem::path& dir, int n_layers);

}  // namespace waste::ipc

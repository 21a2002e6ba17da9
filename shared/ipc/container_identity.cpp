#include "shared/ipc/container_identity.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "shared/ipc/shm_layout.hpp"

namespace waste::ipc {

Result<ContainerIdentity> container_identity(const std::filesystem::path& dir, int n_layers) {
  ContainerIdentity id;
  std::error_code ec;
  id.canonical = std::filesystem::weakly_canonical(dir, ec);
  if (ec) id.canonical = dir;
  id.path_hash = fnv1a64(id.canonical.string());
  std::vector<std::string> names{"manifest.json", "trunk.bin", "codebooks.bin"};
  for (int l = 0; l < n_layers; ++l) names.push_back("experts-L" + std::to_string(l) + ".bin");
  for (const std::string& name : names) {
    struct stat st {};
    const auto path = id.canonical / name;
    if (::stat(path.c_str(), &st) != 0) {
      if (name == "manifest.json") {
        return make_error(Errc::io, "container identity: " + path.string() + ": " + std::strerror(errno));
      }
      continue;  // optional file, or a layer without experts
    }
    ContainerFileIdentity f;
    f.name = name;
    f.name_hash = fnv1a64(name);
    f.inode = std::uint64_t(st.st_ino);
    f.device = std::uint64_t(st.st_dev);
    f.size = std::uint64_t(st.st_size);
    f.mtime_ns = std::int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    id.files.push_back(std::move(f));
  }
  return id;
}

}  // namespace waste::ipc

#include "shared/ipc/orphan_segments.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

#include "shared/ipc/runtime_dir.hpp"
#include "shared/ipc/segment_names.hpp"
#include "shared/ipc/shm_layout.hpp"

namespace waste::ipc {

namespace {

// The daemon pid of an arena segment file, or -1 when it is not a complete waste arena header.
int arena_daemon_pid(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  alignas(ControlHeaderShm) unsigned char raw[sizeof(ControlHeaderShm)];
  const ssize_t got = ::pread(fd, raw, sizeof raw, 0);
  ::close(fd);
  if (got != static_cast<ssize_t>(sizeof raw)) return -1;
  std::uint64_t magic = 0;
  std::int32_t pid = -1;
  std::memcpy(&magic, raw + offsetof(ControlHeaderShm, magic), sizeof magic);
  std::memcpy(&pid, raw + offsetof(ControlHeaderShm, daemon_pid), sizeof pid);
  return magic == kArenaMagic && pid > 0 ? pid : -1;
}

}  // namespace

std::vector<std::string> remove_orphan_segments(std::string_view instance_prefix) {
  const std::filesystem::path shm_dir = "/dev/shm";
  std::vector<std::string> removed;
  const std::string prefix = "waste_" + std::to_string(::getuid()) + "_";
  const std::string suffix = "_arena";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(shm_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix)) continue;
    const std::string instance = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (!instance.starts_with(instance_prefix)) continue;
    const int pid = arena_daemon_pid(entry.path());
    if (pid <= 0 || process_alive(pid)) continue;
    for (auto& what : remove_instance_files(instance)) removed.push_back(std::move(what));
    // The wake segment and every lease's ring segment (runtime_dir knows only arena and trunk).
    const std::string wake = wake_segment_name(instance);
    const std::string rings = ring_segment_prefix(instance);
    for (const auto& other : std::filesystem::directory_iterator(shm_dir, ec)) {
      const std::string file = other.path().filename().string();
      if (file != wake && !(file.starts_with(rings) && file.find("_g", rings.size()) != std::string::npos)) continue;
      std::error_code rm;
      if (std::filesystem::remove(other.path(), rm)) removed.push_back("shm " + file);
    }
  }
  return removed;
}

}  // namespace waste::ipc

#include "shared/memory/ram.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace waste {

std::uint64_t physical_ram_bytes() noexcept {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_bytes = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_bytes <= 0) return 0;
  return std::uint64_t(pages) * std::uint64_t(page_bytes);
}

namespace {

// A memory.max / memory.high value: a decimal byte count, optionally newline-terminated.
// "max", empty, malformed or zero all mean "no limit here".
std::optional<std::uint64_t> read_limit_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::string text;
  std::getline(in, text);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  if (text.empty()) return std::nullopt;
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value == 0) return std::nullopt;
  return value;
}

}  // namespace

std::optional<std::uint64_t> cgroup_memory_limit(const std::filesystem::path& proc_self_cgroup,
                                                 const std::filesystem::path& cgroup_root) {
  std::ifstream in(proc_self_cgroup);
  if (!in) return std::nullopt;
  std::string line;
  std::string rel;
  bool found = false;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) {
      rel = line.substr(3);
      found = true;
      break;
    }
  }
  if (!found || rel.empty() || rel.front() != '/') return std::nullopt;
  // A path that climbs out of the mount could make us read someone else's limits.
  if (rel.find("..") != std::string::npos) return std::nullopt;

  std::optional<std::uint64_t> best;
  std::filesystem::path dir = cgroup_root.string() + rel;
  const std::filesystem::path root = cgroup_root.lexically_normal();
  for (;;) {
    for (const char* name : {"memory.max", "memory.high"}) {
      if (const auto v = read_limit_file(dir / name)) best = best ? std::min(*best, *v) : *v;
    }
    std::filesystem::path norm = dir.lexically_normal();
    if (norm == root || norm.string() == root.string() + "/") break;
    std::filesystem::path parent = norm.has_filename() ? norm.parent_path() : norm.parent_path().parent_path();
    if (parent == norm || parent.string().size() < root.string().size()) break;
    dir = parent;
  }
  return best;
}

UsableRam usable_ram(std::uint64_t physical_bytes, std::optional<std::uint64_t> cgroup_bytes) noexcept {
  UsableRam r;
  r.physical_bytes = physical_bytes;
  r.cgroup_bytes = cgroup_bytes;
  r.usable_bytes = physical_bytes;
  if (cgroup_bytes && (physical_bytes == 0 || *cgroup_bytes < physical_bytes)) r.usable_bytes = *cgroup_bytes;
  // 3/4, not 7/8: at 7/8 the public engine's automatic budget for K3 (8 experts/token, 64 GB)
  // ran at 0.08 tok/s with the OS paging the cache; at 3/4, 0.88 tok/s (its release 0.6.7).
  r.cap_bytes = r.usable_bytes - r.usable_bytes / 4;
  return r;
}

UsableRam usable_ram() {
  // Tests pin the machine (two tiny daemons must collide under a small cap); bytes, decimal.
  if (const char* pinned = std::getenv("WASTE_USABLE_RAM"); pinned != nullptr && *pinned != '\0') {
    std::uint64_t value = 0;
    const char* end = pinned + std::strlen(pinned);
    const auto [ptr, ec] = std::from_chars(pinned, end, value);
    if (ec == std::errc() && ptr == end && value > 0) return usable_ram(value, std::nullopt);
  }
  return usable_ram(physical_ram_bytes(), cgroup_memory_limit());
}

}  // namespace waste

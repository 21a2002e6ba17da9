// How much RAM this process may size a budget against (waste-v0-reference.md §4.2): physical
// RAM and the cgroup v2 memory limit, never current pressure (a sample would make two identical
// commands resolve different budgets).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

namespace waste {

// _SC_PHYS_PAGES * _SC_PAGESIZE; 0 when the system cannot say.
std::uint64_t physical_ram_bytes() noexcept;

// The smallest memory.max / memory.high (decimal bytes) from this process's cgroup up to and
// including the mount root. `proc_self_cgroup` is the file to read the `0::<path>` line from,
// `cgroup_root` the cgroup2 mount; both are parameters so tests can use fake trees.
// "max", unreadable or malformed values mean "no limit at that level"; nullopt when no level
// limits, when there is no `0::` line, or when the path contains "..".
std::optional<std::uint64_t> cgroup_memory_limit(
    const std::filesystem::path& proc_self_cgroup = "/proc/self/cgroup",
    const std::filesystem::path& cgroup_root = "/sys/fs/cgroup");

struct UsableRam {
  std::uint64_t physical_bytes = 0;            // 0 = unknown
  std::optional<std::uint64_t> cgroup_bytes;   // nullopt = no cgroup limit
  std::uint64_t usable_bytes = 0;              // min(physical, cgroup); 0 = unknown
  std::uint64_t cap_bytes = 0;                 // usable - usable/4 (3/4 for all daemons); 0 = unknown
};

UsableRam usable_ram(std::uint64_t physical_bytes, std::optional<std::uint64_t> cgroup_bytes) noexcept;
// This machine, this process; $WASTE_USABLE_RAM (decimal bytes) pins it (tests).
UsableRam usable_ram();

}  // namespace waste

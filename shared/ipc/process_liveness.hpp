// Is a process (still) alive? kill(pid, 0) alone is not enough: a killed child stays a zombie
// until reaped (kill succeeds on it), and a pid can be reused. So liveness reads
// /proc/<pid>/stat: the process exists, is not a zombie, and started at the recorded time.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace waste::ipc {

// Start time of `pid` (clock ticks since boot, /proc/<pid>/stat field 22); nullopt when the
// process does not exist or is a zombie/dead.
std::optional<std::uint64_t> process_start_ticks(int pid);

// True when `pid` runs and (if start_ticks != 0) is the process that started at start_ticks.
bool process_alive(int pid, std::uint64_t start_ticks = 0);

// How long ago `pid` started (start ticks against /proc/uptime); nullopt when it is not running.
std::optional<std::chrono::milliseconds> process_age(int pid);

}  // namespace waste::ipc

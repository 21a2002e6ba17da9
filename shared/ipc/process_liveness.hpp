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

// A handle on one process that answers "is it verifiably dead?" without pid-reuse races: a pidfd
// (pidfd_open, Linux >= 5.3; readable once the process has exited, zombie included) where the
// kernel allows it, else pid + /proc start time. A stopped (SIGSTOP) process is alive.
class ProcessWatch {
 public:
  ProcessWatch() = default;
  ~ProcessWatch();
  ProcessWatch(ProcessWatch&& other) noexcept;
  ProcessWatch& operator=(ProcessWatch&& other) noexcept;
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  // nullopt when `pid` does not run (or is a zombie) now.
  static std::optional<ProcessWatch> open(int pid);
  [[nodiscard]] bool dead() const;
  [[nodiscard]] int pid() const noexcept { return pid_; }
  [[nodiscard]] std::uint64_t start_ticks() const noexcept { return start_ticks_; }
  [[nodiscard]] bool uses_pidfd() const noexcept { return pidfd_ >= 0; }

 private:
  int pid_ = 0;
  std::uint64_t start_ticks_ = 0;
  int pidfd_ = -1;
};

}  // namespace waste::ipc

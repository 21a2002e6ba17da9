// Child `waste` processes for the benchmark modes that need a fresh process per run (--sweep:
// a cold cache per budget) or several at once (--clients), and their memory as the kernel
// accounts it (/proc/PID/smaps_rollup), so shared memory can be counted once (PSS).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "shared/result.hpp"

namespace waste::cli::bench {

// This executable (/proc/self/exe), so children run the same build.
Result<std::filesystem::path> self_executable();

// Starts `self args...` with stdout to `stdout_path` and stderr inherited.
Result<pid_t> spawn_self(const std::vector<std::string>& args, const std::filesystem::path& stdout_path);

// Waits for `pid`; the exit status (128 + signal when killed).
Result<int> wait_child(pid_t pid);

struct ProcessMemory {
  std::uint64_t rss_bytes = 0;
  std::uint64_t pss_bytes = 0;      // shared pages divided among the processes mapping them
  std::uint64_t shared_bytes = 0;   // Shared_Clean + Shared_Dirty
  [[nodiscard]] std::uint64_t private_bytes() const { return rss_bytes - shared_bytes; }
};

// From /proc/PID/smaps_rollup. Errc::io when the process is gone or the file is unreadable.
Result<ProcessMemory> read_process_memory(pid_t pid);
// Parses smaps_rollup text (kB fields), for tests.
ProcessMemory parse_smaps_rollup(const std::string& text);

// utime + stime of a process in seconds, from /proc/PID/stat. Errc::io when it is gone.
Result<double> read_process_cpu_seconds(pid_t pid);

// `sync; echo 3 > /proc/sys/vm/drop_caches`: true when it worked (needs root).
bool drop_page_cache();

}  // namespace waste::cli::bench

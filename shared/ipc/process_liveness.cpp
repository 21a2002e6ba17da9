#include "shared/ipc/process_liveness.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace waste::ipc {

std::optional<std::uint64_t> process_start_ticks(int pid) {
  if (pid <= 0) return std::nullopt;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  // "pid (comm) state ...": comm may contain spaces and parentheses, so parse after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return std::nullopt;
  p += 2;
  const char state = *p;
  if (state == 'Z' || state == 'X' || state == 'x') return std::nullopt;
  // state is field 3; starttime is field 22 => skip 19 more fields.
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return std::nullopt;
    ++p;
  }
  return std::strtoull(p, nullptr, 10);
}

std::optional<std::chrono::milliseconds> process_age(int pid) {
  const auto start = process_start_ticks(pid);
  if (!start) return std::nullopt;
  std::FILE* f = std::fopen("/proc/uptime", "re");
  if (f == nullptr) return std::nullopt;
  double uptime_s = 0;
  const int got = std::fscanf(f, "%lf", &uptime_s);
  std::fclose(f);
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (got != 1 || hz <= 0) return std::nullopt;
  const double age_s = uptime_s - double(*start) / double(hz);
  return std::chrono::milliseconds(age_s > 0 ? std::int64_t(age_s * 1000.0) : 0);
}

bool process_alive(int pid, std::uint64_t start_ticks) {
  const auto now = process_start_ticks(pid);
  if (!now) return false;
  return start_ticks == 0 || *now == start_ticks;
}

}  // namespace waste::ipc

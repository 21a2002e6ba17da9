#include "shared/ipc/process_liveness.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

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

ProcessWatch::~ProcessWatch() {
  if (pidfd_ >= 0) ::close(pidfd_);
}

ProcessWatch::ProcessWatch(ProcessWatch&& other) noexcept
    : pid_(other.pid_), start_ticks_(other.start_ticks_), pidfd_(std::exchange(other.pidfd_, -1)) {}

ProcessWatch& ProcessWatch::operator=(ProcessWatch&& other) noexcept {
  if (this != &other) {
    if (pidfd_ >= 0) ::close(pidfd_);
    pid_ = other.pid_;
    start_ticks_ = other.start_ticks_;
    pidfd_ = std::exchange(other.pidfd_, -1);
  }
  return *this;
}

std::optional<ProcessWatch> ProcessWatch::open(int pid) {
  ProcessWatch w;
  w.pid_ = pid;
#ifdef SYS_pidfd_open
  w.pidfd_ = int(::syscall(SYS_pidfd_open, pid, 0));  // -1 (ENOSYS, EPERM in some sandboxes): fall back
#endif
  // Start time read after the pidfd: if the pid was reused in between, the ticks are the new
  // process's and the pidfd refers to it too, so both name the same process.
  const auto ticks = process_start_ticks(pid);
  if (!ticks) return std::nullopt;
  w.start_ticks_ = *ticks;
  return w;
}

bool ProcessWatch::dead() const {
  if (pidfd_ >= 0) {
    pollfd p{pidfd_, POLLIN, 0};
    const int r = ::poll(&p, 1, 0);
    if (r > 0) return true;   // exited (a zombie counts as dead)
    if (r == 0) return false;
  }
  return !process_alive(pid_, start_ticks_);
}

}  // namespace waste::ipc

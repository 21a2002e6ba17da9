#include "ioserver/control/daemonize.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace waste::ioserver {

ReadinessPipe& ReadinessPipe::operator=(ReadinessPipe&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

ReadinessPipe::~ReadinessPipe() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadinessPipe::ready(const std::string& message) { send('R', message); }
void ReadinessPipe::failed(const std::string& message) { send('F', message); }

void ReadinessPipe::send(char status, const std::string& message) {
  if (fd_ < 0) return;
  std::string text(1, status);
  text += message;
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n;
    left -= std::size_t(n);
  }
  ::close(fd_);
  fd_ = -1;
}

Result<DaemonizeOutcome> daemonize(std::chrono::milliseconds ready_timeout, const std::string& log) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return make_error(Errc::io, std::string("daemonize: pipe: ") + std::strerror(errno));
  const pid_t first = ::fork();
  if (first < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return make_error(Errc::io, std::string("daemonize: fork: ") + std::strerror(errno));
  }
  if (first > 0) {
    // The starter: reap the intermediate child, then wait for the daemon's word.
    ::close(fds[1]);
    int status = 0;
    while (::waitpid(first, &status, 0) < 0 && errno == EINTR) {
    }
    std::string text;
    char buf[512];
    bool silent = false;
    const auto deadline = std::chrono::steady_clock::now() + ready_timeout;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd pfd{fds[0], POLLIN, 0};
      const int ready = left.count() > 0 ? ::poll(&pfd, 1, int(std::min<long long>(left.count(), 1000))) : 0;
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        if (left.count() > 1000) continue;
        silent = true;  // alive (the pipe is open) but no word within the bound
        break;
      }
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      text.append(buf, std::size_t(n));
    }
    ::close(fds[0]);
    DaemonizeOutcome outcome;
    if (silent) {
      const auto s = std::chrono::duration_cast<std::chrono::seconds>(ready_timeout).count();
      std::fprintf(stderr, "waste-ioserver: did not report ready within %lld s%s\n", static_cast<long long>(s),
                   log.empty() ? "" : (" (still starting? its log: " + log + ")").c_str());
      outcome.exit_code = 1;
      return outcome;
    }
    if (!text.empty() && text[0] == 'R') {
      if (text.size() > 1) std::fprintf(stdout, "%s\n", text.c_str() + 1);
      outcome.exit_code = 0;
    } else {
      const std::string why = text.size() > 1 ? text.substr(1) : "waste-ioserver exited before it was ready";
      std::fprintf(stderr, "waste-ioserver: %s\n", why.c_str());
      outcome.exit_code = 1;
    }
    return outcome;
  }
  ::close(fds[0]);
  ::setsid();
  const pid_t second = ::fork();
  if (second < 0) ::_exit(1);
  if (second > 0) ::_exit(0);   // the session leader goes; the daemon can never regain a tty
  if (::chdir("/") != 0) {
    // Not fatal: every path the daemon uses is absolute.
  }
  const int devnull = ::open("/dev/null", O_RDWR);
  if (devnull >= 0) {
    ::dup2(devnull, 0);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    if (devnull > 2) ::close(devnull);
  }
  DaemonizeOutcome outcome;
  outcome.is_daemon = true;
  outcome.readiness = ReadinessPipe(fds[1]);
  return outcome;
}

}  // namespace waste::ioserver

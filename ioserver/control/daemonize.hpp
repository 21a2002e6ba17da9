// Detach from the terminal (double fork + setsid) while letting the starting process report
// whether the daemon came up: the original process waits on a pipe until the daemon says
// "ready" or sends its error, so `waste-ioserver MODEL` exits 0 only once the socket answers.
// Call before any thread is started (fork keeps only the calling thread).
#pragma once

#include <chrono>
#include <string>

#include "shared/result.hpp"

namespace waste::ioserver {

class ReadinessPipe {
 public:
  ReadinessPipe() = default;
  explicit ReadinessPipe(int write_fd) : fd_(write_fd) {}
  ReadinessPipe(ReadinessPipe&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  ReadinessPipe& operator=(ReadinessPipe&& other) noexcept;
  ~ReadinessPipe();

  // The first call wins; both close the pipe. No-op without a pipe (--foreground).
  void ready(const std::string& message);
  void failed(const std::string& message);

 private:
  void send(char status, const std::string& message);
  int fd_ = -1;
};

struct DaemonizeOutcome {
  bool is_daemon = false;     // true: continue as the daemon; false: the starter, return exit_code
  int exit_code = 0;
  ReadinessPipe readiness;    // daemon side only
};

// In the starter: waits for the daemon's report, prints its message (stdout when ready, stderr
// on failure) and returns exit_code 0 or 1. The wait follows the daemon: its death closes the
// pipe at once ("exited before it was ready"); a daemon still alive but silent after
// `ready_timeout` fails too, naming `log` (where its progress is). In the daemon:
// stdin/stdout/stderr go to /dev/null, cwd becomes "/", a new session.
Result<DaemonizeOutcome> daemonize(std::chrono::milliseconds ready_timeout = std::chrono::minutes(10),
                                   const std::string& log = {});

}  // namespace waste::ioserver

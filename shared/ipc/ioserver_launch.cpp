#include "shared/ipc/ioserver_launch.hpp"

#include "shared/runtime_paths.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

namespace waste::ipc {

namespace fs = std::filesystem;

Result<fs::path> find_ioserver_binary() {
  if (const char* over = std::getenv("WASTE_IOSERVER"); over != nullptr && *over != '\0') {
    if (::access(over, X_OK) == 0) return fs::path(over);
    return make_error(Errc::io, std::string("WASTE_IOSERVER=") + over + " is not an executable");
  }
  // Beside the running program or libwaste.so first (installed: bin/, relocatable; build tree:
  // ../ioserver/), so an install never runs another tree's daemon found on PATH.
  for (const fs::path& dir : ioserver_dir_candidates()) {
    const fs::path candidate = dir / "waste-ioserver";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  const fs::path self = self_exe_path();
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    std::stringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
      const fs::path candidate = fs::path(dir.empty() ? "." : dir) / "waste-ioserver";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return make_error(Errc::io, "waste-ioserver not found next to " + self.string() + " nor on PATH (set WASTE_IOSERVER)");
}

void close_inherited_fds() noexcept {
  if (::close_range(3, ~0U, 0) == 0) return;
  // Kernels before 5.9: close one by one (async-signal-safe; this runs between fork and exec).
  const long max_fd = ::sysconf(_SC_OPEN_MAX);
  for (int fd = 3; fd < (max_fd > 0 && max_fd < 65536 ? int(max_fd) : 65536); ++fd) ::close(fd);
}

Status run_ioserver(const std::vector<std::string>& args, bool quiet_stdout) {
  auto binary = find_ioserver_binary();
  if (!binary) return std::unexpected(binary.error());
  std::vector<std::string> argv_store;
  argv_store.push_back(binary->string());
  argv_store.insert(argv_store.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return make_error(Errc::io, std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    if (quiet_stdout) {
      const int devnull = ::open("/dev/null", O_WRONLY);
      if (devnull >= 0) ::dup2(devnull, 1);
    }
    // Nothing of the caller past stderr lives on in a daemon that outlives it: its sockets, an
    // HTTP listener, a session file, a pipe whose reader waits for EOF.
    close_inherited_fds();
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return make_error(Errc::io, std::string("waitpid: ") + std::strerror(errno));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return ok();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return make_error(Errc::io, binary->string() + ": cannot execute");
  }
  return make_error(Errc::ipc, "waste-ioserver failed to start (" +
                                   (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                                      : "signal " + std::to_string(WTERMSIG(status))) +
                                   ")");
}

std::optional<DaemonInfo> find_daemon_for_model(const fs::path& container) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(container, ec);
  if (ec) return std::nullopt;
  for (auto& info : list_daemon_infos()) {
    if (info.model == canonical.string() && process_alive(info.pid)) return info;
  }
  return std::nullopt;
}

Result<DaemonInfo> find_daemon(const std::string& name_or_model) {
  std::error_code ec;
  if (fs::is_directory(name_or_model, ec)) {
    if (auto info = find_daemon_for_model(name_or_model)) return *info;
    return make_error(Errc::ipc, "no waste-ioserver is running for " + name_or_model);
  }
  auto info = read_daemon_info(info_path(name_or_model));
  if (!info) return make_error(Errc::ipc, "no waste-ioserver instance named '" + name_or_model + "'");
  if (!process_alive(info->pid)) {
    return make_error(Errc::ipc, "waste-ioserver " + name_or_model + " (pid " + std::to_string(info->pid) +
                                     ") is not running (stale files: run `waste-ctl cleanup`)");
  }
  return info;
}

Error with_log_hint(Error error, const fs::path& log) {
  std::error_code ec;
  if (!log.empty() && fs::exists(log, ec)) error.message += " (its log: " + log.string() + ")";
  return error;
}

bool wait_process_gone(int pid, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (process_alive(pid)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace waste::ipc

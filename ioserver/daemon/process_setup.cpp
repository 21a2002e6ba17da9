#include "ioserver/daemon/process_setup.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/signalfd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace waste::ioserver {

Result<std::shared_ptr<spdlog::logger>> open_daemon_log(const std::filesystem::path& file, bool to_stderr) {
  try {
    std::vector<spdlog::sink_ptr> sinks;
    sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file.string()));
    if (to_stderr) sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    auto log = std::make_shared<spdlog::logger>("waste-ioserver", sinks.begin(), sinks.end());
    log->set_pattern("%Y-%m-%d %H:%M:%S.%e [%l] %v");
    log->flush_on(spdlog::level::info);
    return log;
  } catch (const spdlog::spdlog_ex& e) {
    return make_error(Errc::io, file.string() + ": cannot open log: " + e.what());
  }
}

Result<int> block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  const int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) return make_error(Errc::io, std::string("signalfd: ") + std::strerror(errno));
  ::signal(SIGPIPE, SIG_IGN);
  return fd;
}

}  // namespace waste::ioserver

// The daemon process's own set-up: its log and its signals.
#pragma once

#include <filesystem>
#include <memory>

#include "shared/result.hpp"

namespace spdlog {
class logger;
}

namespace waste::ioserver {

// The log "waste-ioserver": `file` (appended to), and stderr too when `to_stderr`; flushed at
// every info line. Errc::io "FILE: cannot open log: ..." when the file cannot be opened.
Result<std::shared_ptr<spdlog::logger>> open_daemon_log(const std::filesystem::path& file, bool to_stderr);

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (threads started later inherit the
// mask, so the signals arrive only through the returned signalfd, close-on-exec and
// non-blocking) and ignores SIGPIPE. Errc::io "signalfd: ..." when the kernel refuses.
Result<int> block_stop_signals();

}  // namespace waste::ioserver

// Finding and starting waste-ioserver, shared by waste-ctl and the compute side's
// connect_or_spawn, plus locating the daemon that serves a container.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "shared/ipc/runtime_dir.hpp"
#include "shared/result.hpp"

namespace waste::ipc {

// $WASTE_IOSERVER, else next to this executable or libwaste.so (shared/runtime_paths.hpp: the
// install's bin/, the build tree's ioserver/), else PATH.
Result<std::filesystem::path> find_ioserver_binary();

// Closes every descriptor above stderr (close_range, or one by one on an older kernel). For a
// forked child before exec; async-signal-safe.
void close_inherited_fds() noexcept;

// Runs `waste-ioserver args...` (which daemonizes and returns once ready or failed) and waits.
// stderr passes through; stdout too unless quiet_stdout (library callers keep their stdout clean).
// The child inherits stdin, stdout and stderr only (close_inherited_fds).
// Errc::ipc naming the exit status when it fails.
Status run_ioserver(const std::vector<std::string>& args, bool quiet_stdout = false);

// The live daemon whose info file names this container (canonical path), if any.
std::optional<DaemonInfo> find_daemon_for_model(const std::filesystem::path& container);
// By instance name or container path: what `waste-ctl stop X` and `stats X` accept.
Result<DaemonInfo> find_daemon(const std::string& name_or_model);

// `error` plus "(its log: PATH)" when that log file exists: where a failed daemon's story is.
Error with_log_hint(Error error, const std::filesystem::path& log);

// Waits until `pid` is gone, up to `timeout_ms`. true when it is.
bool wait_process_gone(int pid, int timeout_ms);

}  // namespace waste::ipc

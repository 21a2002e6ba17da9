// Where a waste-ioserver instance keeps its public files, and how clients find them:
//   <runtime dir>/waste-<instance>.sock   ZeroMQ control socket (mode 0600)
//   <runtime dir>/waste-<instance>.json   info file {pid, instance, model, socket, budget_bytes, ...}
//   <runtime dir>/waste-<instance>.log    default log file
//   <runtime dir>/waste-<instance>.lock   the daemon's lifetime lock; .start: clients' start lock
//   <runtime dir>/machine-ledger.json     the budgets of all daemons (one machine cap)
// The runtime dir is $WASTE_RUNTIME_DIR (tests), else $XDG_RUNTIME_DIR/waste, else
// /tmp/waste-<uid>; it is created 0700 and must be owned by this user.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/result.hpp"

namespace waste::ipc {

std::filesystem::path runtime_dir();
// Creates the directory (0700) if needed; refuses one owned by another user or open to others.
Result<std::filesystem::path> ensure_runtime_dir();

std::filesystem::path socket_path(std::string_view instance);
std::string socket_endpoint(std::string_view instance);   // "ipc://" + socket_path
std::filesystem::path info_path(std::string_view instance);
std::filesystem::path default_log_path(std::string_view instance);
// waste-<instance>.lock: held (flock) by the instance's daemon from set-up to the end of its
// teardown, so a successor never starts over a predecessor that is still removing its files.
std::filesystem::path lock_path(std::string_view instance);
// waste-<instance>.start: clients hold it around discovery + spawn, so two commands starting at
// once end with one daemon (the loser finds the winner's).
std::filesystem::path start_lock_path(std::string_view instance);
// <runtime dir>/machine-ledger.json: every daemon's budget (shared/memory/machine_ledger.hpp).
std::filesystem::path machine_ledger_path();

// One daemon per container: the default instance name is the container directory's stem
// (sanitised, at most 32 chars) plus 8 hex digits of a hash of its canonical path.
// Errors: Errc::io when the path does not exist.
Result<std::string> instance_for_container(const std::filesystem::path& container);

// kill(pid, 0) succeeds (or EPERM) and the process is not a zombie.
bool process_alive(int pid) noexcept;

struct DaemonInfo {
  int pid = 0;
  std::string instance;
  std::string model;          // canonical container path
  std::string socket;         // "ipc://..."
  std::uint64_t budget_bytes = 0;
  std::uint64_t arena_slots = 0;
  std::string log;
  int protocol = 0;

  [[nodiscard]] nlohmann::json to_json() const;
  static Result<DaemonInfo> from_json(const nlohmann::json& j);
};

// Written atomically (temp file + rename), mode 0600.
Status write_daemon_info(const DaemonInfo& info);
Result<DaemonInfo> read_daemon_info(const std::filesystem::path& file);
// Every waste-*.json in the runtime dir that parses, in name order.
std::vector<DaemonInfo> list_daemon_infos();

// What a crashed instance leaves behind: socket, info file, shared-memory segments.
// Returns a description of each thing removed (empty when nothing was there).
std::vector<std::string> remove_instance_files(std::string_view instance);

}  // namespace waste::ipc

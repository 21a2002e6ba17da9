// Instance set-up, before the daemon forks: what to serve, with how much memory, under which
// instance name, holding that instance's lifetime lock (one daemon per instance: a live twin is
// refused, a crashed one's files are removed).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ioserver/options/daemon_options.hpp"
#include "shared/memory/budget.hpp"
#include "shared/memory/file_lock.hpp"
#include "shared/memory/memory_plan.hpp"
#include "shared/memory/ram.hpp"
#include "shared/result.hpp"

namespace waste::ioserver {

// Everything decided before the daemon forks: what to serve and with how much memory.
struct DaemonSetup {
  DaemonOptions options;
  std::filesystem::path model;       // canonical
  std::string instance;
  MemoryPlan plan;                   // with the floor raised for reserved_clients
  BudgetChoice budget;
  std::uint64_t arena_slots = 0;
  std::vector<std::string> cleaned;  // stale files removed (crashed predecessor)
  UsableRam ram;                     // what the machine cap is taken from
  // The instance's lifetime lock (ipc::lock_path), held until teardown ends. Shared so a
  // setup stays copyable; teardown releases it whoever else holds the pointer.
  std::shared_ptr<FileLock> instance_lock;
};

// Errors: Errc::ram_budget (below floor), Errc::ipc ("waste-ioserver for INSTANCE is already
// running (pid N)"), Errc::io / Errc::format for the container. Waits (options.predecessor_wait)
// for a predecessor that still holds the instance lock while it drains.
// Daemon::init then registers the budget in the machine ledger (an automatic budget is sized
// there against what the other daemons hold, machine_budget.hpp), which may refuse it
// (Errc::ram_budget).
Result<DaemonSetup> resolve_setup(const DaemonOptions& options);

}  // namespace waste::ioserver

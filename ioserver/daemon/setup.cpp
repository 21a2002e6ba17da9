#include "ioserver/daemon/setup.hpp"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include "shared/container/container.hpp"
#include "shared/ipc/process_liveness.hpp"
#include "shared/ipc/runtime_dir.hpp"
#include "shared/ipc/segment_names.hpp"

namespace waste::ioserver {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

Result<DaemonSetup> resolve_setup(const DaemonOptions& options) {
  DaemonSetup setup;
  setup.options = options;
  // A path that is not a container gets the words every other reader gives (it names the path).
  if (auto text = read_manifest_text(options.io.container); !text) return std::unexpected(text.error());
  std::error_code ec;
  setup.model = fs::canonical(options.io.container, ec);
  if (ec) return make_error(Errc::io, options.io.container.string() + ": " + ec.message());
  if (!fs::is_directory(setup.model)) return make_error(Errc::format, setup.model.string() + ": not a container directory");

  if (!options.io.instance.empty()) {
    setup.instance = options.io.instance;
  } else {
    auto derived = ipc::instance_for_container(setup.model);
    if (!derived) return std::unexpected(derived.error());
    setup.instance = *derived;
  }
  WASTE_TRY(ipc::validate_instance_name(setup.instance));
  if (options.reserved_clients < 1) {
    return make_error(Errc::argument,
                      "--reserve-clients must be at least 1, not " + std::to_string(options.reserved_clients));
  }

  auto plan = plan_memory(setup.model);
  if (!plan) return std::unexpected(plan.error());
  // Each client beyond the first holds its own state and scratch next to the shared trunk.
  const std::uint64_t extra = std::uint64_t(options.reserved_clients - 1) * plan->client_bytes();
  plan->floor_bytes += extra;
  plan->recommended_bytes += extra;
  setup.plan = *plan;

  const UsableRam ram = options.ram ? *options.ram : usable_ram();
  auto budget = resolve_budget(setup.plan, options.budget_bytes, ram.cap_bytes);
  if (!budget) return std::unexpected(budget.error());
  setup.budget = *budget;
  setup.arena_slots = arena_slots(setup.plan, setup.budget.budget_bytes);

  setup.ram = ram;

  // One daemon per instance: a live one is an error, a crashed one's leftovers are removed.
  auto dir = ipc::ensure_runtime_dir();
  if (!dir) return std::unexpected(dir.error());
  const auto running = [&]() -> std::optional<Error> {
    if (auto info = ipc::read_daemon_info(ipc::info_path(setup.instance)); info && ipc::process_alive(info->pid, 0) &&
                                                                            info->pid != ::getpid()) {
      return Error{Errc::ipc, "waste-ioserver for " + setup.instance + " is already running (pid " +
                                  std::to_string(info->pid) + ", socket " + info->socket + ")"};
    }
    return std::nullopt;
  };
  if (auto e = running()) return std::unexpected(*e);
  // The lock is held by a daemon that is starting (its info file appears when it is ready) or
  // draining (its info file is already gone): wait for it, unless it turns out to be serving.
  const auto deadline = Clock::now() + options.predecessor_wait;
  for (;;) {
    auto lock = FileLock::try_acquire(ipc::lock_path(setup.instance));
    if (!lock) return std::unexpected(lock.error());
    if (*lock) {
      setup.instance_lock = std::make_shared<FileLock>(std::move(**lock));
      break;
    }
    if (auto e = running()) return std::unexpected(*e);
    if (Clock::now() >= deadline) {
      return make_error(Errc::ipc, "waste-ioserver for " + setup.instance + ": another daemon of this instance is " +
                                       "still starting or stopping after " +
                                       std::to_string(options.predecessor_wait.count()) + " ms (" +
                                       ipc::lock_path(setup.instance).string() + " is locked)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (auto e = running()) return std::unexpected(*e);
  setup.cleaned = ipc::remove_instance_files(setup.instance);
  return setup;
}

}  // namespace waste::ioserver

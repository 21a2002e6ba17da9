#include "ioserver/daemon/machine_budget.hpp"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <vector>

#include <spdlog/spdlog.h>

#include "ioserver/daemon/daemon.hpp"
#include "shared/ipc/process_liveness.hpp"
#include "shared/ipc/runtime_dir.hpp"
#include "shared/memory/machine_ledger.hpp"

namespace waste::ioserver {

Status register_machine_budget(DaemonSetup& setup) {
  MachineLedger ledger(ipc::machine_ledger_path());
  const std::uint64_t cap = setup.ram.cap_bytes;
  const int pid = ::getpid();
  MachineLedgerEntry entry{setup.instance, setup.model.string(), pid, ipc::process_start_ticks(pid).value_or(0), 0};
  const bool explicit_budget = setup.budget.explicit_budget;
  auto registered = ledger.register_daemon(
      entry, cap, [&](std::uint64_t others, const std::vector<MachineLedgerEntry>& holders) -> Result<std::uint64_t> {
        if (explicit_budget || holders.empty()) return setup.budget.budget_bytes;
        const std::uint64_t free = cap > others ? cap - others : 0;
        if (cap != 0 && free < setup.plan.floor_bytes) {
          return make_error(Errc::ram_budget,
                            "no room for " + setup.model.string() + " under the machine cap " + format_bytes(cap) +
                                " (3/4 of usable RAM " + format_bytes(setup.ram.usable_bytes) +
                                "): other daemons hold " + format_bytes(others) + " (" + describe_holders(holders) +
                                "); its floor is " + format_bytes(setup.plan.floor_bytes) + ", at most " +
                                format_bytes(free) + " is free");
        }
        auto choice = resolve_budget(setup.plan, std::nullopt, cap == 0 ? 0 : free);
        if (!choice) return std::unexpected(choice.error());
        setup.budget = *choice;
        return choice->budget_bytes;
      });
  if (!registered) return std::unexpected(registered.error());
  setup.budget.budget_bytes = *registered;
  setup.budget.above_cap = cap != 0 && *registered > cap;
  setup.arena_slots = arena_slots(setup.plan, *registered);
  return ok();
}

LedgerShape ledger_shape(const DaemonSetup& setup) {
  LedgerShape shape;
  shape.container = setup.model.string();
  shape.budget_bytes = setup.budget.budget_bytes;
  shape.trunk_bytes = setup.plan.trunk_bytes;
  shape.record_bytes = setup.plan.max_record_bytes;
  shape.max_slots = setup.arena_slots;
  // 2·top_k records: the cache the plan's floor assumes (rounded up to whole slots).
  shape.floor_slots = shape.record_bytes == 0 ? 0
                                              : (setup.plan.min_expert_cache_bytes + shape.record_bytes - 1) /
                                                    shape.record_bytes;
  return shape;
}

// The Daemon's budget while it serves: an automatic one follows its clients (within the cap).

std::uint64_t Daemon::budget_for(std::uint64_t extra_state) const noexcept {
  // The whole arena beside the trunk and every client's state, never under the start budget.
  return std::max(base_budget_, ledger_.trunk_bytes() + ledger_.max_slots() * ledger_.record_bytes() +
                                    ledger_.clients_bytes() + extra_state);
}

void Daemon::grow_budget_for(std::uint64_t state_bytes) {
  if (setup_.budget.explicit_budget || draining_) return;
  const std::uint64_t want = budget_for(state_bytes);
  if (want <= ledger_.budget_bytes()) return;
  if (auto st = MachineLedger(ipc::machine_ledger_path())
                    .update_budget(info_.instance, info_.pid, want, setup_.ram.cap_bytes, /*strict=*/true);
      !st) {
    log_->info("automatic budget stays {}: {}", format_bytes(ledger_.budget_bytes()), st.error().message);
    return;
  }
  if (!ledger_.set_budget(want)) return;
  info_.budget_bytes = want;
  (void)ipc::write_daemon_info(info_);
  log_->info("automatic budget raised to {} for a client's state of {}", format_bytes(want), format_bytes(state_bytes));
}

void Daemon::shrink_budget_to_clients() {
  if (setup_.budget.explicit_budget) return;
  const std::uint64_t want = budget_for(0);
  if (want >= ledger_.budget_bytes() || !ledger_.set_budget(want)) return;
  // Lowering never passes the cap; a failure to write leaves the larger figure (pruned later).
  (void)MachineLedger(ipc::machine_ledger_path()).update_budget(info_.instance, info_.pid, want, 0);
  info_.budget_bytes = want;
  if (!draining_) (void)ipc::write_daemon_info(info_);
}

Status Daemon::apply_cache_slots() {
  const std::uint64_t want = ledger_.usable_slots();
  if (want == cache_slots_) return ok();
  if (auto st = plane_->set_cache_slots(std::uint32_t(want)); !st) return st;
  log_->info("expert cache: {} of {} slots usable", want, ledger_.max_slots());
  cache_slots_ = want;
  return ok();
}

}  // namespace waste::ioserver

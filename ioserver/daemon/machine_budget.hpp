// The daemon's share of the machine: its budget registered in the machine ledger (one file for
// every daemon of this user, shared/memory/machine_ledger.hpp) and the shape of its own budget
// ledger (trunk, arena slots, clients' state: shared/memory/budget_ledger.hpp).
// The Daemon's budget members that follow its clients (budget_for, grow_budget_for,
// shrink_budget_to_clients, apply_cache_slots) are defined in machine_budget.cpp too.
#pragma once

#include "ioserver/daemon/setup.hpp"
#include "shared/memory/budget_ledger.hpp"
#include "shared/result.hpp"

namespace waste::ioserver {

// Registers the budget in the machine ledger under its lock; an automatic one is sized there
// against the cap minus what the other daemons hold (so two daemons never both size against
// the whole machine). Updates setup's budget and arena. Call after the fork: the entry carries
// this process's pid. Errc::ram_budget when no room is left under the cap.
Status register_machine_budget(DaemonSetup& setup);

// The budget ledger's shape for this set-up (floor_slots: the 2·top_k records the floor assumes).
LedgerShape ledger_shape(const DaemonSetup& setup);

}  // namespace waste::ioserver

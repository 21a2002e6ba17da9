// RAM budget resolution (waste-v0-reference.md §4.2) and byte-size text: an explicit budget is a
// contract (refused below the floor); an automatic one holds the whole expert set when that fits
// under the cap (every record in its own arena slot), else takes floor + k * working set for the
// largest k in {3, 2, 1} that fits, else the floor.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "shared/memory/memory_plan.hpp"
#include "shared/result.hpp"

namespace waste {

struct BudgetChoice {
  std::uint64_t budget_bytes = 0;
  bool explicit_budget = false;  // the caller gave it
  int working_sets = 0;          // automatic: how many working sets above the floor (0 = floor)
  bool whole_expert_set = false; // automatic: the budget is whole_expert_set_budget (every record has a slot)
  bool above_cap = false;        // budget > cap: the OS will page the expert cache out (warn)
};

// The automatic rule, in one place: the floor plus as many whole working sets (3 at most) as fit
// under `room`; a fraction of one keeps nothing alive between tokens (waste-lessons.md §1.4).
// The floor alone (0 sets) when not even one fits.
struct WorkingSets {
  std::uint64_t bytes = 0;
  int count = 0;
};
WorkingSets floor_plus_working_sets(std::uint64_t floor_bytes, std::uint64_t working_set_bytes,
                                    std::uint64_t room_bytes) noexcept;

// The budget whose arena holds every expert record of the container: the floor with its minimal
// expert cache replaced by one max_record_bytes slot per record (arena_slots of it is
// expert_records, or the minimal cache's slots when that is more). 0 when there are no records.
std::uint64_t whole_expert_set_budget(const MemoryPlan& plan) noexcept;

// The automatic rule for a known room: the whole expert set (whole_set_bytes, 0 = none) when it
// fits, else floor_plus_working_sets. The one place both the daemon's budget (resolve_budget) and
// a server's per-model budget (cli/serve/model_budget.cpp) are decided.
struct AutomaticBudget {
  std::uint64_t bytes = 0;
  int working_sets = 0;
  bool whole_expert_set = false;
};
AutomaticBudget automatic_budget(std::uint64_t floor_bytes, std::uint64_t working_set_bytes,
                                 std::uint64_t whole_set_bytes, std::uint64_t room_bytes) noexcept;

// cap_bytes 0 = unknown: automatic then takes floor + 3 * ws, as the reference does, and never
// the whole expert set (nothing says it fits).
// Error (Errc::ram_budget): "budget 100.0 MB is below the floor 1.28 GB for this model".
Result<BudgetChoice> resolve_budget(const MemoryPlan& plan, std::optional<std::uint64_t> requested_bytes,
                                    std::uint64_t cap_bytes);

// Expert cache a budget buys: budget - floor + min_expert_cache (the floor already holds the
// minimal cache). Precondition: budget >= floor.
std::uint64_t expert_cache_bytes(const MemoryPlan& plan, std::uint64_t budget_bytes) noexcept;
// Arena slots of max_record_bytes each in that cache (0 when a record does not fit).
std::uint64_t arena_slots(const MemoryPlan& plan, std::uint64_t budget_bytes) noexcept;
// Whether a compute client holding this budget also loads the on-disk embedding table (no disk
// read per token): when the budget covers the recommended plan plus the table, so the table never
// takes the expert cache below floor + 3 working sets. The table's bytes then come out of the
// expert cache (arena_slots(plan, budget - embed_bytes)). False when nothing is on disk.
bool embedding_resident(const MemoryPlan& plan, std::uint64_t budget_bytes) noexcept;

// Binary units, as the reference CLI prints them: "1.28 GB", "100.0 MB", "12.0 KB", "512 B".
std::string format_bytes(std::uint64_t bytes);
// "8G", "1.5g", "500M", "64k", "12345", "4GB", "2GiB". Errors: Errc::argument naming the text.
Result<std::uint64_t> parse_bytes(std::string_view text);

}  // namespace waste

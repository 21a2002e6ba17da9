#include "cli/serve/model_budget.hpp"

#include <algorithm>

#include "shared/memory/budget.hpp"

namespace waste::serve {

ModelFootprint model_footprint(const MemoryPlan& plan, const MemoryPlan& daemon_plan, int sequences, int ctx_tokens,
                               std::uint64_t client_extra_bytes) {
  // The daemon keeps whole slots of its largest record for the cache's floor (budget_ledger.hpp).
  const std::uint64_t record = plan.max_record_bytes;
  const std::uint64_t cache_floor =
      record == 0 ? plan.min_expert_cache_bytes : (plan.min_expert_cache_bytes + record - 1) / record * record;
  const std::uint64_t client =
      plan.state_bytes * std::uint64_t(std::max(1, sequences)) + plan.scratch_bytes + client_extra_bytes;
  ModelFootprint f;
  f.floor_bytes = std::max(plan.trunk_bytes + cache_floor + client, daemon_plan.floor_bytes);
  f.working_set_bytes = plan.working_set_bytes;
  f.sequences = sequences;
  f.ctx_tokens = ctx_tokens;
  // Every record in its own slot beside the trunk and the clients, never under what the daemon's
  // own rule would take for the whole set.
  if (plan.expert_records > 0 && record > 0) {
    f.whole_set_bytes = std::max({plan.trunk_bytes + client + std::max(plan.expert_records * record, cache_floor),
                                  whole_expert_set_budget(daemon_plan), f.floor_bytes});
  }
  return f;
}

ApiError insufficient_memory(const std::string& id, const std::string& message) {
  return ApiError{507, "model '" + id + "' could not load: " + message, "server_error", "model", "insufficient_memory"};
}

std::expected<LoadDecision, ApiError> decide_load(const std::string& id, const ModelFootprint& need,
                                                  const ServerBudget& budget, std::uint64_t others_bytes,
                                                  std::vector<BudgetHolder> held, std::size_t models) {
  const auto minus = [](std::uint64_t a, std::uint64_t b) { return a > b ? a - b : 0; };
  std::uint64_t held_bytes = 0;
  for (const BudgetHolder& h : held) held_bytes += h.bytes;
  std::uint64_t left = minus(minus(budget.bytes, others_bytes), held_bytes);
  LoadDecision decision;
  if (need.floor_bytes > left) {
    // Room from idle models, least recently used first, as few as it takes.
    std::vector<const BudgetHolder*> idle;
    for (const BudgetHolder& h : held) {
      if (h.idle) idle.push_back(&h);
    }
    std::stable_sort(idle.begin(), idle.end(),
                     [](const BudgetHolder* a, const BudgetHolder* b) { return a->last_used < b->last_used; });
    std::uint64_t freed = 0;
    for (const BudgetHolder* h : idle) {
      if (need.floor_bytes <= left + freed) break;
      decision.unload.push_back(h->id);
      freed += h->bytes;
    }
    if (need.floor_bytes > left + freed) {
      std::string message = "model '" + id + "' does not fit the budget: it needs " + format_bytes(need.floor_bytes) +
                            " (its memory plan's floor for " + std::to_string(need.sequences) +
                            (need.sequences == 1 ? " sequence" : " sequences") + " at ctx " +
                            std::to_string(need.ctx_tokens) + "), " + format_bytes(left) + " of the budget " +
                            format_bytes(budget.bytes) + " (" + budget.source + ") is left";
      std::string holders;
      for (const BudgetHolder& h : held) {
        holders += (holders.empty() ? "; '" : ", '") + h.id + "' holds " + format_bytes(h.bytes) + " (" +
                   (h.idle ? "idle" : h.state) + ")";
      }
      message += holders;
      if (others_bytes > 0) {
        message += (holders.empty() ? "; " : ", ") + std::string("other waste-ioserver daemons hold ") +
                   format_bytes(others_bytes);
      }
      return std::unexpected(ApiError{507, std::move(message), "server_error", "model", "insufficient_memory"});
    }
    left += freed;
  }
  // The whole expert set or whole working sets within what is left and the model's equal share
  // (never under its floor).
  const std::uint64_t share = minus(budget.bytes, others_bytes) / std::max<std::size_t>(1, models);
  const std::uint64_t room = std::min(left, std::max(share, need.floor_bytes));
  decision.budget_bytes = automatic_budget(need.floor_bytes, need.working_set_bytes, need.whole_set_bytes, room).bytes;
  return decision;
}

}  // namespace waste::serve

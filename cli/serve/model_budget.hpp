// Whether one more model fits the server's budget, decided before anything is loaded
// (docs/design/serve.md, Several models): a model's footprint comes from its memory plan (the
// floor its daemon budget may not go under, for the server's --parallel sequences at its --ctx,
// and one token's experts); the server's budget is --budget or the machine cap; what is left is
// the budget minus what the server's loaded models hold (and, for the machine cap, what other
// waste-ioserver daemons hold). A model that does not fit unloads idle models, least recently
// used first, until it does; when even that is not enough the answer is a 507 naming the budget.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <vector>

#include "cli/serve/api_error.hpp"
#include "shared/memory/memory_plan.hpp"

namespace waste::serve {

// The budget every model of the server shares.
struct ServerBudget {
  std::uint64_t bytes = 0;
  std::string source;  // how it was chosen: "--budget 64M", "the machine cap (3/4 of usable RAM 16.0 GB)"
};

// What loading one model takes.
struct ModelFootprint {
  std::uint64_t floor_bytes = 0;        // the least its daemon's budget may be
  std::uint64_t working_set_bytes = 0;  // one token's experts (what each step of the cache adds)
  int sequences = 1;                    // --parallel, for the refusal's words
  int ctx_tokens = 0;                   // --ctx
  std::uint64_t whole_set_bytes = 0;    // a budget whose arena holds every expert record (0 = none)
};

// From the plan at the server's ctx (`plan`) and the plan a daemon checks an explicit budget
// against (`daemon_plan`, at the default ctx): trunk + the expert cache's floor (whole arena
// slots) + `sequences` sequences' state and one scratch, and never under the daemon's floor.
// `client_extra_bytes`: what the engine holds beside its plan's state and scratch (the decode head's
// copy, compute/model/decode_head.hpp), counted with the client.
ModelFootprint model_footprint(const MemoryPlan& plan, const MemoryPlan& daemon_plan, int sequences, int ctx_tokens,
                               std::uint64_t client_extra_bytes = 0);

// A model of this server that holds part of the budget.
struct BudgetHolder {
  std::string id;
  std::uint64_t bytes = 0;
  bool idle = false;            // loaded, nothing in flight or waiting for it: may be unloaded for room
  std::uint64_t last_used = 0;  // larger = used more recently
  const char* state = "in use"; // the refusal's word for a holder that is not idle ("in use", "loading")
};

struct LoadDecision {
  std::uint64_t budget_bytes = 0;   // the model's (its daemon's) budget
  std::vector<std::string> unload;  // idle models to unload first, least recently used first
};

// The decision for model `id`: its budget holds its whole expert set when that fits (the
// automatic rule, shared/memory/budget.hpp), else its floor plus the most whole working sets (3, 2, 1
// or none) that fit both what is left and an equal share of the budget (budget - others, over
// `models` configured), so models that each fit their floor are loaded side by side rather than
// the first one taking everything. Refusal: 507, type "server_error", code "insufficient_memory",
// param "model":
//   "model 'B' does not fit the budget: it needs 40.0 MB (its memory plan's floor for 2 sequences at
//    ctx 512), 12.0 MB of the budget 64.0 MB (--budget 64M) is left; 'A' holds 52.0 MB (in use)"
// (", other waste-ioserver daemons hold 5.0 MB" when `others_bytes` is not 0).
std::expected<LoadDecision, ApiError> decide_load(const std::string& id, const ModelFootprint& need,
                                                  const ServerBudget& budget, std::uint64_t others_bytes,
                                                  std::vector<BudgetHolder> held, std::size_t models);

// A refusal of the kind decide_load gives, for a load that failed on budget grounds after the
// decision (the machine ledger or the daemon refusing): "model 'B' could not load: MESSAGE".
ApiError insufficient_memory(const std::string& id, const std::string& message);

}  // namespace waste::serve

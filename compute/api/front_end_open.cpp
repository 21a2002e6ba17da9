#include "compute/api/front_end_open.hpp"

#include <string>

#include "shared/memory/budget.hpp"
#include "shared/memory/memory_plan.hpp"
#include "shared/memory/ram.hpp"

namespace waste {

void request_daemon(EngineOptions& options, std::string_view budget, bool verify, bool direct_io, int linger_ms) {
  options.daemon.enabled = true;
  if (!budget.empty()) options.daemon.spawn_args.insert(options.daemon.spawn_args.end(), {"--budget", std::string(budget)});
  if (verify) options.daemon.spawn_args.emplace_back("--verify");
  if (!direct_io) options.daemon.spawn_args.emplace_back("--no-direct-io");
  options.daemon.linger_ms = linger_ms;
}

Result<InProcessCache> in_process_cache(const std::filesystem::path& model, int ctx_tokens,
                                        std::optional<std::uint64_t> cache_records, std::string_view budget) {
  if (cache_records) return InProcessCache{*cache_records, 0, false};
  auto plan = plan_memory(model, std::uint32_t(ctx_tokens));
  if (!plan) return std::unexpected(plan.error());
  std::optional<std::uint64_t> requested;
  if (!budget.empty()) {
    auto bytes = parse_bytes(budget);
    if (!bytes) return std::unexpected(bytes.error());
    requested = *bytes;
  }
  auto choice = resolve_budget(*plan, requested, usable_ram().cap_bytes);
  if (!choice) return std::unexpected(choice.error());
  const bool embed = embedding_resident(*plan, choice->budget_bytes);
  const std::uint64_t for_experts = choice->budget_bytes - (embed ? plan->embed_bytes : 0);
  return InProcessCache{arena_slots(*plan, for_experts), choice->budget_bytes, choice->above_cap, embed};
}

}  // namespace waste

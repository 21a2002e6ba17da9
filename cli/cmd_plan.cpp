// waste plan MODEL: the memory plan from the manifest alone (reference §4.1) and the budget this
// machine would resolve (§4.2). One "name bytes (human)" line per figure, or --json.
#include <cstdio>
#include <optional>
#include <string>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "cli/option_checks.hpp"
#include "shared/memory/budget.hpp"
#include "shared/memory/memory_plan.hpp"
#include "shared/memory/ram.hpp"

namespace waste::cli {
namespace {

struct PlanArgs {
  std::string model;
  int ctx = 4096;
  int prefill_chunk = kPrefillChunkTokens;  // the engine's prefill_chunk the scratch is planned for
  std::string budget;
  bool json = false;
};

void line(const char* name, std::uint64_t bytes) {
  std::printf("%-20s %14llu  (%s)\n", name, static_cast<unsigned long long>(bytes), format_bytes(bytes).c_str());
}

int run_plan(const PlanArgs& a) {
  auto plan = plan_memory(std::filesystem::path(a.model), std::uint32_t(a.ctx), a.prefill_chunk);
  if (!plan) return report_error("plan", plan.error());
  std::optional<std::uint64_t> requested;
  if (!a.budget.empty()) {
    auto bytes = parse_bytes(a.budget);
    if (!bytes) return report_error("plan", bytes.error());
    requested = *bytes;
  }
  const UsableRam ram = usable_ram();
  auto choice = resolve_budget(*plan, requested, ram.cap_bytes);
  if (!choice) return report_error("plan", choice.error());
  const std::uint64_t cache = expert_cache_bytes(*plan, choice->budget_bytes);
  const std::uint64_t slots = arena_slots(*plan, choice->budget_bytes);

  if (a.json) {
    print_json({{"model", a.model},
                {"ctx_tokens", a.ctx},
                {"prefill_chunk", a.prefill_chunk},
                {"trunk_bytes", plan->trunk_bytes},
                {"vision_bytes", plan->vision_bytes},
                {"state_bytes", plan->state_bytes},
                {"scratch_bytes", plan->scratch_bytes},
                {"record_bytes", plan->record_bytes},
                {"min_expert_cache_bytes", plan->min_expert_cache_bytes},
                {"floor_bytes", plan->floor_bytes},
                {"working_set_bytes", plan->working_set_bytes},
                {"recommended_bytes", plan->recommended_bytes},
                {"physical_ram_bytes", ram.physical_bytes},
                {"cgroup_limit_bytes", ram.cgroup_bytes ? nlohmann::json(*ram.cgroup_bytes) : nlohmann::json(nullptr)},
                {"cap_bytes", ram.cap_bytes},
                {"budget_bytes", choice->budget_bytes},
                {"budget_explicit", choice->explicit_budget},
                {"budget_working_sets", choice->working_sets},
                {"budget_above_cap", choice->above_cap},
                {"expert_cache_bytes", cache},
                {"cache_slots", slots}});
    return 0;
  }
  std::printf("memory plan for %s at ctx %d\n", a.model.c_str(), a.ctx);
  line("trunk", plan->trunk_bytes);
  if (plan->vision_bytes) line("vision", plan->vision_bytes);
  line("state", plan->state_bytes);
  line("scratch", plan->scratch_bytes);
  line("min_expert_cache", plan->min_expert_cache_bytes);
  line("floor", plan->floor_bytes);
  line("working_set", plan->working_set_bytes);
  line("recommended", plan->recommended_bytes);
  line("physical_ram", ram.physical_bytes);
  if (ram.cgroup_bytes) line("cgroup_limit", *ram.cgroup_bytes);
  line("cap", ram.cap_bytes);
  line("budget", choice->budget_bytes);
  line("expert_cache", cache);
  std::printf("%-20s %14llu\n", "cache_slots", static_cast<unsigned long long>(slots));
  if (choice->explicit_budget) {
    std::printf("budget given%s\n", choice->above_cap ? " (above the cap: the OS will page the cache out)" : "");
  } else if (choice->working_sets > 0) {
    std::printf("budget automatic: floor + %d working sets\n", choice->working_sets);
  } else {
    std::printf("budget automatic: floor only%s\n", choice->above_cap ? " (above the cap)" : "");
  }
  return 0;
}

const CommandRegistration kRegistration{Command{
    "plan", "Print the memory plan and the budget this machine would get",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<PlanArgs>();
      sub.add_option("model", args->model, "Container directory (NAME.waste)")->type_name("DIR")->required();
      sub.add_option("--ctx", args->ctx, "Context length in tokens")
          ->type_name("TOKENS")
          ->check(int_range("--ctx", 1, kMaxCtxTokens));
      sub.add_option("--prefill-chunk", args->prefill_chunk,
                     "Tokens per prefill pass the scratch is planned for (an engine's prefill_chunk)")
          ->type_name("TOKENS")
          ->check(int_range("--prefill-chunk", 1, kMaxPrefillChunkTokens));
      sub.add_option("--budget", args->budget,
                     "RAM budget to check, in bytes with a K/M/G/T suffix (8G, 500M); auto = this machine's")
          ->type_name("SIZE")
          ->default_str("auto")
          ->transform(byte_size("--budget"));
      sub.add_flag("--json", args->json, "JSON output");
      return [args] { return run_plan(*args); };
    }}};

}  // namespace
}  // namespace waste::cli

// waste plan MODEL: the memory plan from the manifest alone (reference §4.1) and the budget this
// machine would resolve (§4.2). One "name bytes (human)" line per figure, or --json.
// waste plan --preset NAME | --config FILE [synth's options]: the same plan for the container
// `waste synth` would write with those options, from its manifest planned in memory
// (synth::plan_manifest), so a model too large for this disk still gets its plan.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "cli/option_checks.hpp"
#include "shared/memory/budget.hpp"
#include "shared/memory/memory_plan.hpp"
#include "shared/memory/ram.hpp"
#include "shared/synth/synth.hpp"

namespace waste::cli {
namespace {

struct PlanArgs {
  std::string model;
  // The container `waste synth` would write (the same options, the same meanings).
  synth::SynthRequest request;
  std::string config_file, experts, trunk;
  std::uint64_t engram_rows = 0;  // Engram tables stay on disk: accepted as synth's, no figure changes
  int engram_bits = 8;
  std::vector<std::string> synth_options_given;  // e.g. "--layers", refused with a container
  int ctx = 4096;
  int prefill_chunk = kPrefillChunkTokens;  // the engine's prefill_chunk the scratch is planned for
  std::string budget;
  bool json = false;
};

void line(const char* name, std::uint64_t bytes) {
  std::printf("%-20s %14llu  (%s)\n", name, static_cast<unsigned long long>(bytes), format_bytes(bytes).c_str());
}

// Where the plan comes from: a container's manifest.json, or the manifest synth would write.
struct PlanSource {
  std::string kind;   // "container", "preset" or "config"
  std::string name;   // the container path, preset name or config file
  std::string title;  // the text output's first line, up to " at ctx N"
};

Result<MemoryPlan> planned_from_synth(const PlanArgs& a, std::uint32_t ctx) {
  synth::SynthRequest request = a.request;
  request.config_file = a.config_file;
  if (!a.experts.empty()) request.experts = a.experts;
  if (!a.trunk.empty()) request.trunk = a.trunk;
  auto spec = synth::make_spec(request);
  if (!spec) return std::unexpected(spec.error());
  auto manifest = synth::plan_manifest(*spec);
  if (!manifest) return std::unexpected(manifest.error());
  return plan_memory(*manifest, ctx, a.prefill_chunk);
}

int run_plan(const PlanArgs& a) {
  const int sources = int(!a.model.empty()) + int(!a.request.preset.empty()) + int(!a.config_file.empty());
  if (sources != 1) return report_error("plan", "give exactly one of MODEL, --preset or --config");
  PlanSource source;
  if (!a.model.empty()) {
    if (!a.synth_options_given.empty()) {
      return report_error("plan", a.synth_options_given.front() +
                                      " plans a synthetic container: it needs --preset or --config, not MODEL");
    }
    source = {"container", a.model, "memory plan for " + a.model};
  } else {
    const bool preset = !a.request.preset.empty();
    source.kind = preset ? "preset" : "config";
    source.name = preset ? a.request.preset : a.config_file;
    std::string cut;
    if (a.request.layers != 0) cut = " --layers " + std::to_string(a.request.layers);
    source.title = "memory plan for " + source.kind + " " + source.name + cut + " (planned from the " + source.kind +
                   ", not read from a container)";
  }
  auto plan = source.kind == "container"
                  ? plan_memory(std::filesystem::path(a.model), std::uint32_t(a.ctx), a.prefill_chunk)
                  : planned_from_synth(a, std::uint32_t(a.ctx));
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
    print_json({{"source", source.kind},
                {"model", source.name},
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
                {"expert_records", plan->expert_records},
                {"whole_expert_set_bytes", whole_expert_set_budget(*plan)},
                {"recommended_bytes", plan->recommended_bytes},
                {"physical_ram_bytes", ram.physical_bytes},
                {"cgroup_limit_bytes", ram.cgroup_bytes ? nlohmann::json(*ram.cgroup_bytes) : nlohmann::json(nullptr)},
                {"cap_bytes", ram.cap_bytes},
                {"budget_bytes", choice->budget_bytes},
                {"budget_explicit", choice->explicit_budget},
                {"budget_working_sets", choice->working_sets},
                {"budget_whole_expert_set", choice->whole_expert_set},
                {"budget_above_cap", choice->above_cap},
                {"expert_cache_bytes", cache},
                {"cache_slots", slots}});
    return 0;
  }
  std::printf("%s at ctx %d\n", source.title.c_str(), a.ctx);
  line("trunk", plan->trunk_bytes);
  if (plan->vision_bytes) line("vision", plan->vision_bytes);
  line("state", plan->state_bytes);
  line("scratch", plan->scratch_bytes);
  line("min_expert_cache", plan->min_expert_cache_bytes);
  line("floor", plan->floor_bytes);
  line("working_set", plan->working_set_bytes);
  line("recommended", plan->recommended_bytes);
  line("whole_expert_set", whole_expert_set_budget(*plan));
  line("physical_ram", ram.physical_bytes);
  if (ram.cgroup_bytes) line("cgroup_limit", *ram.cgroup_bytes);
  line("cap", ram.cap_bytes);
  line("budget", choice->budget_bytes);
  line("expert_cache", cache);
  std::printf("%-20s %14llu\n", "cache_slots", static_cast<unsigned long long>(slots));
  if (choice->explicit_budget) {
    std::printf("budget given%s\n", choice->above_cap ? " (above the cap: the OS will page the cache out)" : "");
  } else if (choice->whole_expert_set) {
    std::printf("budget automatic: the whole expert set (%llu records)\n",
                static_cast<unsigned long long>(plan->expert_records));
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
      sub.add_option("model", args->model, "Container directory (NAME.waste); or --preset / --config")
          ->type_name("DIR")
          ->default_str("none");
      sub.add_option("--preset", args->request.preset,
                     "Plan the container `waste synth --preset NAME` would write, without writing it: " +
                         synth::preset_list())
          ->type_name("NAME")
          ->default_str("none");
      sub.add_option("--config", args->config_file,
                     "Plan the container `waste synth --config FILE` would write (HF-style config.json)")
          ->type_name("FILE")
          ->default_str("none");
      // synth's options that shape the container, with synth's meanings and checks.
      std::vector<CLI::Option*> shaping;
      shaping.push_back(sub.add_option("--layers", args->request.layers,
                                       "With --preset/--config: keep only the first N layers (0 = all)")
                            ->type_name("N")
                            ->check(int_range("--layers", 0, 1024)));
      shaping.push_back(sub.add_option("--experts", args->experts, "With --preset/--config: expert format")
                            ->type_name("FORMAT")
                            ->default_str("the preset's")
                            ->check(one_of("--experts", std::vector<std::string>{"vq3r", "vq2r", "vq4p"})));
      shaping.push_back(sub.add_option("--trunk", args->trunk, "With --preset/--config: trunk matrix format")
                            ->type_name("FORMAT")
                            ->default_str("the preset's")
                            ->check(one_of("--trunk", std::vector<std::string>{"q4g", "q8g", "q3g"})));
      shaping.push_back(sub.add_flag("--tokenizer", args->request.tokenizer,
                                     "With --preset/--config: the synthetic tokenizer's vocabulary "
                                     "(as `waste synth --tokenizer`)"));
      shaping.push_back(sub.add_option("--engram-rows", args->engram_rows,
                                       "With --preset/--config: synth's cap on Engram table rows (the tables "
                                       "stay on disk: no figure changes)")
                            ->type_name("N")
                            ->default_str("0")
                            ->check(u64_value("--engram-rows")));
      shaping.push_back(sub.add_option("--engram-bits", args->engram_bits,
                                       "With --preset/--config: synth's Engram row bits (no figure changes)")
                            ->type_name("4|8")
                            ->default_str("8")
                            ->check(one_of("--engram-bits", std::vector<int>{4, 8})));
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
      return [args, shaping] {
        for (const CLI::Option* o : shaping) {
          if (o->count() > 0) args->synth_options_given.push_back(o->get_name());
        }
        return run_plan(*args);
      };
    }}};

}  // namespace
}  // namespace waste::cli

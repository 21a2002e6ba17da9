#include "cli/bench/bench_engine.hpp"

#include <cstdio>

#include "compute/io/local_expert_source.hpp"
#include "shared/container/container.hpp"
#include "shared/memory/budget.hpp"
#include "shared/memory/memory_plan.hpp"
#include "shared/memory/ram.hpp"

namespace waste::cli::bench {
namespace {

// Cache records for a local source: --cache-records, else the budget's arena (as open_engine).
Result<std::uint64_t> local_cache_records(const EngineArgs& a, std::uint64_t& budget_bytes) {
  if (a.cache_records) return std::uint64_t(*a.cache_records);
  auto plan = plan_memory(std::filesystem::path(a.model), std::uint32_t(a.ctx));
  if (!plan) return std::unexpected(plan.error());
  std::optional<std::uint64_t> requested;
  if (!a.budget.empty()) {
    auto bytes = parse_bytes(a.budget);
    if (!bytes) return std::unexpected(bytes.error());
    requested = *bytes;
  }
  auto choice = resolve_budget(*plan, requested, usable_ram().cap_bytes);
  if (!choice) return std::unexpected(choice.error());
  if (choice->above_cap) {
    std::fprintf(stderr, "waste: warning: budget %s is above what this machine can hold; expect paging\n",
                 format_bytes(choice->budget_bytes).c_str());
  }
  budget_bytes = choice->budget_bytes;
  return arena_slots(*plan, choice->budget_bytes);
}

}  // namespace

Result<BenchEngine> open_bench_engine(const BenchEngineArgs& args) {
  const EngineArgs& a = args.engine;
  EngineOptions options;
  options.model = a.model;
  options.threads = a.threads;
  options.ctx_tokens = a.ctx;
  options.verify_records = a.verify;
  options.direct_io = !a.no_direct_io;
  options.lookahead = args.lookahead;
  options.profile = args.profile;
  options.resident_experts = args.resident;
  options.prefill_chunk = args.prefill_chunk;

  auto info = ContainerInfo::open(a.model);
  if (!info) return std::unexpected(info.error());

  BenchEngine out;
  std::unique_ptr<ExpertSource> source;
  std::shared_ptr<const Trunk> trunk;
  if (args.resident && a.daemon) {
    return make_error(Errc::argument, "--compute-only reads every expert in-process; drop --daemon");
  }
  if (a.daemon && !a.use_daemon()) {
    return make_error(Errc::argument, "--daemon cannot be combined with --in-process or --cache-records");
  }
  // The daemon is the default (as for every command); --compute-only is in-process by nature.
  if (a.use_daemon() && !args.resident) {
    std::vector<std::string> private_args;
    if (!a.budget.empty()) private_args.insert(private_args.end(), {"--budget", a.budget});
    if (a.verify) private_args.emplace_back("--verify");
    if (a.no_direct_io) private_args.emplace_back("--no-direct-io");
    WASTE_TRY(attach_daemon(a.model, out.open.daemon, private_args));
    out.via_daemon = true;
    out.open.budget_bytes = daemon_budget_of(*out.open.daemon);
    out.cache_records = daemon_arena_slots_of(*out.open.daemon);
    auto src = open_daemon_source(lease_of(*out.open.daemon), info->geometry);
    if (!src) return std::unexpected(src.error());
    source = std::move(*src);
    auto shared = open_daemon_trunk(lease_of(*out.open.daemon), a.model, info->manifest);
    if (!shared) return std::unexpected(shared.error());
    trunk = std::move(*shared);
  } else {
    auto records = local_cache_records(a, out.open.budget_bytes);
    if (!records) return std::unexpected(records.error());
    out.cache_records = *records;
    options.cache_records = std::size_t(*records);
    if (args.record_trace) {
      auto local = LocalExpertSource::open(*info, LocalSourceOptions{options.direct_io, options.verify_records,
                                                                     options.cache_records, options.reader_threads,
                                                                     options.resident_experts});
      if (!local) return std::unexpected(local.error());
      source = std::move(*local);
    }
  }
  if (args.record_trace) {
    out.trace = std::make_shared<std::vector<TraceEvent>>();
    source = std::make_unique<TracingExpertSource>(std::move(source), out.trace);
  }
  auto engine = Engine::open(options, std::move(source), std::move(trunk));
  if (!engine) return std::unexpected(engine.error());
  out.open.engine = std::move(*engine);
  return out;
}

}  // namespace waste::cli::bench

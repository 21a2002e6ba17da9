#include "cli/bench/bench_engine.hpp"

#include <cstdio>

#include "compute/io/in_process_plane.hpp"
#include "shared/container/container.hpp"
#include "shared/memory/budget.hpp"
#include "shared/memory/memory_plan.hpp"
#include "shared/memory/ram.hpp"

namespace waste::cli::bench {
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
  WASTE_TRY(check_cache_records(a));
  // The daemon is the default (as for every command); --compute-only is in-process by nature.
  if (a.use_daemon() && !args.resident) {
    std::vector<std::string> private_args;
    if (!a.budget.empty()) private_args.insert(private_args.end(), {"--budget", a.budget});
    if (a.verify) private_args.emplace_back("--verify");
    if (a.no_direct_io) private_args.emplace_back("--no-direct-io");
    WASTE_TRY(attach_daemon(a.model, out.open.daemon, private_args, a.linger_ms));
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
    // In-process: the daemon's data plane in this process (a private IoServer) with the arena
    // the budget (or --cache-records) gives; --compute-only holds every record.
    auto records = local_cache_records(a, out.open.budget_bytes);
    if (!records) return std::unexpected(records.error());
    InProcessPlaneOptions io;
    io.arena_slots = records->records;
    // --compute-only holds everything in memory; otherwise the budget decides (embedding_resident).
    options.resident_embedding = !args.embedding_on_disk && (args.resident || records->resident_embedding);
    io.reader_threads = options.reader_threads;
    io.direct_io = options.direct_io;
    io.verify_crc = options.verify_records;
    io.resident = options.resident_experts;
    auto plane = open_in_process_plane(a.model, *info, io);
    if (!plane) return std::unexpected(plane.error());
    out.cache_records = plane->arena_slots;
    source = std::move(plane->source);
    trunk = std::move(plane->trunk);
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

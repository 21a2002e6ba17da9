#include "compute/api/engine_open.hpp"

#include <chrono>
#include <string>
#include <vector>

#include "compute/engram/engram_json.hpp"
#include "compute/io/daemon_attach.hpp"
#include "compute/io/daemon_connect.hpp"
#include "compute/io/in_process_plane.hpp"
#include "compute/model/decode_head.hpp"
#include "shared/memory/budget.hpp"
#include "shared/memory/ram.hpp"

namespace waste {

Result<std::shared_ptr<const ContainerInfo>> read_container(const std::filesystem::path& model) {
  auto info = ContainerInfo::open(model);
  if (!info) return std::unexpected(info.error());
  return std::make_shared<const ContainerInfo>(std::move(*info));
}

Result<InProcessCache> in_process_cache(const MemoryPlan& plan, std::string_view budget, std::uint64_t client_extra_bytes) {
  std::optional<std::uint64_t> requested;
  if (!budget.empty()) {
    auto bytes = parse_bytes(budget);
    if (!bytes) return std::unexpected(bytes.error());
    requested = *bytes;
  }
  auto choice = resolve_budget(plan, requested, usable_ram().cap_bytes);
  if (!choice) return std::unexpected(choice.error());
  const bool embed = embedding_resident(plan, choice->budget_bytes);
  // A budget given is the whole process's: the extra bytes come out of the experts' share. The
  // automatic one is the plan's choice, which does not know them: they come on top.
  const std::uint64_t held = (embed ? plan.embed_bytes : 0) + (requested ? client_extra_bytes : 0);
  const std::uint64_t for_experts = choice->budget_bytes > held ? choice->budget_bytes - held : 0;
  return InProcessCache{arena_slots(plan, for_experts), choice->budget_bytes + (requested ? 0 : client_extra_bytes),
                        choice->above_cap, embed};
}

Result<InProcessCache> in_process_cache(const std::filesystem::path& model, int ctx_tokens,
                                        std::optional<std::uint64_t> cache_records, std::string_view budget) {
  if (cache_records) return InProcessCache{*cache_records, 0, false};
  auto plan = plan_memory(model, std::uint32_t(ctx_tokens));
  if (!plan) return std::unexpected(plan.error());
  return in_process_cache(*plan, budget);
}

Result<EngineParts> open_expert_plane(const EngineOptions& options, const ContainerInfo& container) {
  EngineParts parts;
  if (options.daemon.enabled) {
    // Through waste-ioserver: the daemon serving this container, or its shareable one started
    // now with the spawn arguments; it admits this engine's state (every sequence) and scratch.
    if (options.daemon.sequences < 1) {
      return make_error(Errc::argument, "daemon.sequences " + std::to_string(options.daemon.sequences) + " must be 1 or more");
    }
    ConnectOptions co;
    co.allow_spawn = options.daemon.allow_spawn;
    co.spawn_args = options.daemon.spawn_args;
    if (options.daemon.linger_ms >= 0) co.linger = std::chrono::milliseconds(options.daemon.linger_ms);
    auto plan = plan_memory(container.manifest, std::uint32_t(options.ctx_tokens), options.prefill_chunk);
    if (!plan) return std::unexpected(plan.error());
    // The decode head's copy (compute/model/decode_head.hpp) is this engine's too.
    co.state_bytes = plan->state_bytes * std::uint64_t(options.daemon.sequences) + plan->scratch_bytes +
                     model::decode_head_copy_bytes(container.manifest);
    auto attached = attach_daemon(options.model, container, co);
    if (!attached) return std::unexpected(attached.error());
    parts.daemon = std::move(attached->connection);
    parts.source = std::move(attached->source);
    parts.trunk = std::move(attached->trunk);
    if (container.manifest.config.uses_engram()) {
      // The Engram rows from the daemon's shared page pool on a lease of their own; a daemon that
      // cannot serve them (no pool, another geometry) leaves the engine its own reads, and says why.
      auto tables = engram::load_engram_tables(options.model);
      if (!tables) return std::unexpected(tables.error());
      auto rows = open_daemon_engram_rows(options.model, tables->layout, co);
      if (rows) {
        parts.engram_rows = std::move(*rows);
        parts.engram_tables = std::move(*tables);
        parts.engram_note = "Engram rows: waste-ioserver's shared page pool (pid " +
                            std::to_string(parts.daemon->daemon().pid) + ")";
      } else {
        parts.engram_note = "the daemon does not serve them: " + rows.error().message;
      }
    }
    return parts;
  }
  // No daemon: its own data plane inside this process (private IoServer, read through
  // DaemonExpertSource), its trunk image included.
  if (container.manifest.config.n_experts == 0) {
    return make_error(Errc::unsupported, options.model.string() + ": models without routed experts are not supported");
  }
  InProcessPlaneOptions io;
  io.arena_slots = options.cache_records;
  io.reader_threads = options.reader_threads;
  io.direct_io = options.direct_io;
  io.verify_crc = options.verify_records;
  io.resident = options.resident_experts;
  // The Engram rows from the private IoServer's page pool, as the daemon would serve them.
  std::optional<engram::EngramTables> tables;
  if (container.manifest.config.uses_engram()) {
    auto loaded = engram::load_engram_tables(options.model);
    if (!loaded) return std::unexpected(loaded.error());
    tables = std::move(*loaded);
    io.engram_layout = &tables->layout;
  }
  auto plane = open_in_process_plane(options.model, container, io);
  if (!plane) return std::unexpected(plane.error());
  parts.source = std::move(plane->source);
  parts.trunk = std::move(plane->trunk);
  if (plane->engram_rows) {
    parts.engram_rows = std::move(plane->engram_rows);
    parts.engram_tables = std::move(tables);
    parts.engram_note = "Engram rows: the in-process data plane's shared page pool";
  }
  return parts;
}

namespace {

// What a waste-ioserver this open starts is given from the user's read options.
std::vector<std::string> daemon_spawn_args(const OpenRequest& r) {
  std::vector<std::string> args;
  if (!r.budget.empty()) args.insert(args.end(), {"--budget", r.budget});
  if (r.engine.verify_records) args.emplace_back("--verify");
  if (!r.engine.direct_io) args.emplace_back("--no-direct-io");
  return args;
}

}  // namespace

Result<OpenedEngine> open_engine(const OpenRequest& r) {
  EngineOptions options = r.engine;
  WASTE_TRY(Engine::check_options(options));
  std::shared_ptr<const ContainerInfo> container = r.container;
  if (!container) {
    auto read = read_container(options.model);
    if (!read) return std::unexpected(read.error());
    container = std::move(*read);
  }
  OpenedEngine out;
  // Resident experts live in the in-process arena only.
  out.via_daemon = !r.in_process && !options.resident_experts;
  if (out.via_daemon) {
    options.daemon.enabled = true;
    options.daemon.allow_spawn = r.allow_spawn;
    options.daemon.spawn_args = daemon_spawn_args(r);
    options.daemon.linger_ms = r.linger_ms;
    options.daemon.sequences = r.sequences;
  } else {
    options.daemon = DaemonOpenOptions{};
    // The arena: --cache-records as given (embedding on disk), else what the budget leaves.
    Result<InProcessCache> cache = InProcessCache{r.cache_records.value_or(0), 0, false};
    if (!r.cache_records) {
      auto plan = plan_memory(container->manifest, std::uint32_t(options.ctx_tokens), options.prefill_chunk);
      if (!plan) return std::unexpected(plan.error());
      cache = in_process_cache(*plan, r.budget, model::decode_head_copy_bytes(container->manifest));
      if (!cache) return std::unexpected(cache.error());
    }
    if (r.on_cache) r.on_cache(*cache);
    out.budget_bytes = cache->budget_bytes;
    options.cache_records = std::size_t(cache->records);
    options.resident_embedding = !r.embedding_on_disk && (options.resident_experts || cache->resident_embedding);
  }
  auto parts = open_expert_plane(options, *container);
  if (!parts) return std::unexpected(parts.error());
  if (parts->daemon) {
    out.budget_bytes = parts->daemon->daemon().budget_bytes;
    out.arena_slots = parts->daemon->daemon().arena_slots;
    out.daemon_options_ignored = !parts->daemon->spawned() && !options.daemon.spawn_args.empty();
  } else {
    out.arena_slots = parts->source->cache_capacity_records();
  }
  if (r.wrap_source) parts->source = r.wrap_source(std::move(parts->source));
  auto engine = Engine::open(options, std::move(container), std::move(*parts));
  if (!engine) return std::unexpected(engine.error());
  out.engine = std::move(*engine);
  return out;
}

}  // namespace waste

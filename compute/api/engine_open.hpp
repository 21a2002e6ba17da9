// The one way an engine is opened. Every front end (the CLI's commands, `waste bench`, `waste
// serve`, the C API) describes what its user asked for in an OpenRequest and calls open_engine;
// this file alone decides:
//   - daemon or in-process (the request's `in_process`, or resident experts, which only the
//     in-process plane holds),
//   - what a waste-ioserver started now gets: `--budget B` (unless automatic), `--verify`,
//     `--no-direct-io`, its linger, and the state the engine declares (ctx, sequences),
//   - the in-process arena from a record count or a budget (given or automatic, reference §4.2),
//   - the container's identity: its description (ContainerInfo, manifest.json parsed once) is
//     read here, or handed in by a caller that read it first (e.g. for its tokenizer), and that
//     one value feeds the memory plan, the daemon attach, the engine, and (through
//     Engine::container()) the tokenizer and the vision tower.
// Errors come back with the words of the step that failed; nothing here prints (front ends
// print their warnings from the result and the on_cache hook).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "compute/api/engine.hpp"
#include "shared/container/container.hpp"
#include "shared/memory/memory_plan.hpp"
#include "shared/result.hpp"

namespace waste {

// The container's description (ContainerInfo::open: manifest.json parsed and checked), shared by
// everything that opens from it. Errors as ContainerInfo::open.
Result<std::shared_ptr<const ContainerInfo>> read_container(const std::filesystem::path& model);

struct InProcessCache {
  std::uint64_t records = 0;       // arena slots
  std::uint64_t budget_bytes = 0;  // the resolved budget; 0 when `cache_records` was given
  bool above_cap = false;          // the budget exceeds what this machine can hold (expect paging)
  bool resident_embedding = false; // the budget also holds embed_tokens (EngineOptions::resident_embedding);
                                   // `records` is then what is left after it
};
// The arena the budget (`budget` "" = automatic) leaves, after the embedding table when
// embedding_resident() says it fits; `client_extra_bytes` this process holds beside its plan (the
// decode head's copy: model::decode_head_copy_bytes) come out of a given budget's experts' share, and
// on top of the automatic one (budget_bytes then counts them).
Result<InProcessCache> in_process_cache(const MemoryPlan& plan, std::string_view budget,
                                        std::uint64_t client_extra_bytes = 0);
// `cache_records` if given (embedding on disk), else the same planned from DIR/manifest.json
// (errors name the path).
Result<InProcessCache> in_process_cache(const std::filesystem::path& model, int ctx_tokens,
                                        std::optional<std::uint64_t> cache_records, std::string_view budget);

struct OpenRequest {
  // model, threads, ctx_tokens, verify_records, direct_io and the engine's tuning (lookahead,
  // prefill_chunk, profile, resident_experts); its cache_records, resident_embedding and
  // daemon fields are decided here from the fields below.
  EngineOptions engine;
  // The container's description when the caller has read it already (read_container); null:
  // read here. Must be of engine.model.
  std::shared_ptr<const ContainerInfo> container;
  bool in_process = false;          // the daemon's data plane in this process; else through waste-ioserver
  std::string budget;               // "" = automatic; else "8G", "500M", ...
  std::optional<std::uint64_t> cache_records;  // in-process arena slots (overrides the budget)
  int linger_ms = -1;               // of a daemon this open starts (-1 = default_linger())
  bool allow_spawn = true;          // start the container's daemon when none serves it
  int sequences = 1;                // sequences held at once, declared to the daemon
  bool embedding_on_disk = false;   // keep embed_tokens on disk even when the budget would hold it
  // Called with the resolved in-process cache before the plane opens (the CLI's "above what
  // this machine can hold" warning). Not called on the daemon path.
  std::function<void(const InProcessCache&)> on_cache;
  // Wraps the expert source before the engine takes it (the bench's tracing source).
  std::function<std::unique_ptr<ExpertSource>(std::unique_ptr<ExpertSource>)> wrap_source;
};

// An open engine and what the open decided. The engine holds its daemon connection, if any.
struct OpenedEngine {
  std::unique_ptr<Engine> engine;
  bool via_daemon = false;
  // In-process: the resolved budget (0 when cache_records gave the arena). Daemon: its budget.
  std::uint64_t budget_bytes = 0;
  std::uint64_t arena_slots = 0;    // the in-process arena's slots, or the daemon's
  // A daemon already served the container, so the spawn arguments (budget, verify, direct I/O)
  // this open would have started one with did not apply.
  bool daemon_options_ignored = false;
  Engine* operator->() const { return engine.get(); }
  Engine& operator*() const { return *engine; }
};

Result<OpenedEngine> open_engine(const OpenRequest& request);

// The expert source, trunk and daemon connection an engine with resolved `options` reads through:
// waste-ioserver's (options.daemon.enabled: attach, or start the container's shareable daemon)
// or the in-process data plane. What Engine::open(options) does without a caller's source.
Result<EngineParts> open_expert_plane(const EngineOptions& options, const ContainerInfo& container);

}  // namespace waste

// What every front end (the CLI's commands, the C API) does the same way around Engine::open:
// the daemon's spawn arguments from the user's read options, and the in-process arena's size
// from a record count or a budget (given or automatic, reference §4.2).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

#include "compute/api/engine.hpp"
#include "shared/result.hpp"

namespace waste {

// Turns on the daemon path in `options` and passes what a daemon started now should use:
// `--budget BUDGET` (unless empty), `--verify`, `--no-direct-io`, and the linger time.
void request_daemon(EngineOptions& options, std::string_view budget, bool verify, bool direct_io, int linger_ms);

struct InProcessCache {
  std::uint64_t records = 0;       // arena slots
  std::uint64_t budget_bytes = 0;  // the resolved budget; 0 when `cache_records` was given
  bool above_cap = false;          // the budget exceeds what this machine can hold (expect paging)
  bool resident_embedding = false; // the budget also holds embed_tokens (EngineOptions::resident_embedding);
                                   // `records` is then what is left after it
};
// `cache_records` if given (embedding on disk), else the arena the budget (`budget` "" =
// automatic) leaves, after the embedding table when embedding_resident() says it fits.
Result<InProcessCache> in_process_cache(const std::filesystem::path& model, int ctx_tokens,
                                        std::optional<std::uint64_t> cache_records, std::string_view budget);

}  // namespace waste

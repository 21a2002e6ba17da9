// Opening the engine for `waste bench`: the one open every command makes (cli_common's
// open_request -> compute/api/engine_open.hpp), plus what only the benchmark sets: lookahead
// width, profiling, resident experts and the embedding table (--compute-only, which the open
// runs in-process), the prefill chunk, Engram read-ahead on or off, and trace recording through the open's wrap_source hook.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "cli/bench/trace.hpp"
#include "cli/cli_common.hpp"

namespace waste::cli::bench {

struct BenchEngineArgs {
  EngineArgs engine;
  int lookahead = -1;            // -1 automatic
  bool profile = false;
  bool resident = false;         // every expert read at open (--compute-only)
  bool record_trace = false;     // fill `trace` with every request/prefetch
  int prefill_chunk = 64;        // 1 = the prompt token by token
  bool embedding_on_disk = false;  // keep embed_tokens on disk even when it would be resident
  std::optional<bool> engram_readahead;  // --engram-readahead; nullopt: the engine decides ($WASTE_ENGRAM_READAHEAD, on)
};

struct BenchEngine {
  OpenedEngine open;             // the engine (holding its daemon connection), budget, arena slots
  std::shared_ptr<std::vector<TraceEvent>> trace;  // when record_trace
};

Result<BenchEngine> open_bench_engine(const BenchEngineArgs& args);

}  // namespace waste::cli::bench

// Opening the engine for `waste bench`: the same budget resolution as every other command
// (cli_common's open_engine), plus what only the benchmark sets: lookahead width, profiling,
// resident experts and the embedding table (--compute-only), trace recording, and the daemon path
// (records through waste-ioserver, trunk from its shared image; the embedding stays on disk there).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/bench/daemon_link.hpp"
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
};

struct BenchEngine {
  OpenEngine open;               // engine (+ daemon connection when engine.daemon)
  std::shared_ptr<std::vector<TraceEvent>> trace;  // when record_trace
  std::uint64_t cache_records = 0;                 // local cache records, or the daemon's arena slots
  bool via_daemon = false;
};

Result<BenchEngine> open_bench_engine(const BenchEngineArgs& args);

}  // namespace waste::cli::bench

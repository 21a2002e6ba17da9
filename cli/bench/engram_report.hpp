// `waste bench`'s Engram figures per phase (DeepSeek-V4.1 containers with Engram tables only):
// from the engine's EngramRowStats before and after the phase (Engine::engram_stats(), counted
// by compute/engram's MeteredEngramRows), rows asked, cache hit %, pages and bytes read and the
// layer loop's wait for rows, each per token. One text line per phase, and a JSON object.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "compute/engram/engram_rows.hpp"

namespace waste::cli::bench {

inline constexpr std::uint64_t kEngramPageBytes = 4096;  // disk reads are counted in 4 KiB pages

struct EngramPhase {
  int tokens = 0;
  engram::EngramRowStats rows;  // this phase's counters only
};

// after - before, field by field.
engram::EngramRowStats engram_delta(const engram::EngramRowStats& after, const engram::EngramRowStats& before);

// "engram  prefill  24.00 rows/token  hit  37.5%  15.00 pages/token  61440 B/token  wait 0.012 ms/token  ahead 3.00/token"
// (per token: over the phase's tokens; hit %: hits of hits + misses, 0 when none; ahead: the
// reader's `prefetched`). What the reader counts differs: the page pool (DaemonEngramRows) counts
// pages read for a demand (a miss) in bytes_read and the pages asked ahead in prefetched, so the
// pages its server reads ahead are not in bytes_read; the engine's own EngramRowSource counts every
// page it reads in bytes_read and the rows its reader threads read in prefetched.
std::string engram_phase_line(const char* phase, const EngramPhase& p);

// {"tokens", "rows_asked", "rows_per_token", "hits", "misses", "hit_percent", "pages_read",
//  "pages_per_token", "bytes_read", "bytes_per_token", "wait_seconds", "wait_ms_per_token",
//  "prefetched", "prefetched_per_token"}
nlohmann::json engram_phase_json(const EngramPhase& p);

}  // namespace waste::cli::bench

// IoServerConfig: the data plane's settings, in one struct for every user: IoServer::create,
// the DataPlane factory (ioserver/control/data_plane.hpp), the daemon's options
// (DaemonOptions::io, filled by add_daemon_options) and the in-process plane
// (compute/io/in_process_plane.cpp, with private_memory).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include "ioserver/expert_cache/cache_policy.hpp"

namespace waste {

// Reader threads (= reads in flight) of the daemon: 4, measured with `waste bench MODEL
// --reader-sweep` on the 2-core VM's virtio disk (docs/PERFORMANCE.md, "The reader at the disk's
// ceiling"): depth 4 read more than depth 2 in every sweep, 8 and 16 not consistently more than
// 4. A layer's misses (top_k = 8 on Kimi-Linear) then land in two waves, not four.
inline constexpr int kDefaultReaderThreads = 4;

struct IoServerConfig {
  std::filesystem::path container;    // the NAME.waste directory
  std::string instance;               // unique name part: segment and socket names derive from uid + this
  std::uint64_t arena_slots = 0;      // expert slots in the arena (>= 1)
  CachePolicy policy = kDefaultCachePolicy;
  int reader_threads = kDefaultReaderThreads;  // 1..64
  bool direct_io = true;
  bool verify_crc = false;
  bool io_uring = false;              // read records through io_uring (falls back to pread if refused)
  int max_clients = 16;               // 1..64
  // How long a demand that finds every slot pinned or in flight waits for one to be freed
  // (a release-layer, a detach, a dead client's reclaim, a landed prefetch) before it fails.
  std::chrono::milliseconds arena_wait{10000};
  // Pre-fault the arena's pages in an idle-priority thread, so reads land in mapped memory.
  bool populate_arena = true;
  // Background fill (ioserver/data_plane/fill.cpp): while the usable slots can hold every record
  // of the container, read the records nobody asked for into free slots, one read at a time and
  // only while no other read is queued or in flight; never evicts. Off here (the library's tests
  // and the in-process plane count their own reads); the daemon turns it on (DaemonOptions).
  bool fill = false;
  // The fill reads only once the clients have sent nothing (demand, prefetch, release, Engram)
  // for this long, counted from the server's start too: a sequence that is decoding sends
  // requests every layer, so its reads never queue behind a fill read (on a slow disk one record
  // read is tens of ms); the fill runs in the gaps between requests (a chat user reading, an idle
  // server). 0: no wait (tests of the fill's mechanics).
  std::chrono::milliseconds fill_idle{500};
  // Directory of the segment files: a tmpfs or hugetlbfs mount; empty = /dev/shm. Its free space
  // is checked (statvfs) before any segment is created.
  std::filesystem::path shm_dir;
  // Anonymous MAP_SHARED memory and no names at all: for an IoServer inside its only client's
  // process (`--in-process`, compute/io/in_process_plane.cpp). attach() then returns a lease carrying the mappings.
  bool private_memory = false;
  // Engram page pool (4 KiB slots in the arena segment) when the container holds engram-L{n}.bin
  // tables: 0 = automatic, engram_pool_pages_for(arena bytes). Without tables there is no pool.
  std::uint64_t engram_pool_pages = 0;
};

// The automatic Engram pool: min(64 MiB, 5% of the expert arena's bytes), at least 64 pages.
constexpr std::uint64_t engram_pool_pages_for(std::uint64_t arena_bytes) noexcept {
  const std::uint64_t share = arena_bytes / 20 / 4096, cap = (std::uint64_t{64} << 20) / 4096;
  return share < 64 ? 64 : (share > cap ? cap : share);
}

}  // namespace waste

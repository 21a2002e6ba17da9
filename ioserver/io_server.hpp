// IoServer: the data path of waste-ioserver, as a library class (the daemon's main and the
// tests run it in-process). It owns the arena segment (control block, slot table, client blocks,
// expert slots; clients map it read-only), one ring segment per lease, the wake segment, the
// read-only trunk segment, the expert cache, the reader threads and one service thread that
// drains every client's request ring. Everything a client can write is checked before use; a
// client that breaks the ring protocol is detached (docs/design/ring.md, "Trust boundary").
//
// Threads: the service thread and the reader threads are internal. The public methods may be
// called from any thread (the control plane's); they take the cache mutex briefly.
//
// Sources, by concern: ioserver/data_plane/ (segments.cpp, clients.cpp, request_service.cpp,
// populator.cpp, stats.cpp, io_server.cpp; io_server_impl.hpp is the private state).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ioserver/expert_cache/cache_policy.hpp"
#include "ioserver/io_server_config.hpp"
#include "ioserver/nvme/record_reader.hpp"
#include "shared/ipc/client_lease.hpp"
#include "shared/ipc/container_identity.hpp"
#include "shared/result.hpp"

namespace waste {

struct ContainerInfo;  // shared/container/container.hpp

using ipc::ClientLease;

inline constexpr int kLatencyBuckets = 32;  // bucket i counts reads of [2^i, 2^(i+1)) us (bucket 0: < 2 us)

struct ClientIoStats {
  int client_idx = -1;
  int pid = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t bytes_read = 0;
  std::uint64_t prefetch_reads = 0;
  std::uint32_t pinned_slots = 0;
  std::uint32_t pin_entries = 0;          // the daemon's pin list for it: one per slot, never more
  std::uint32_t demands_waiting = 0;      // its demands waiting for a slot (at most kRingCapacity - 1)
  std::uint32_t request_queue_depth = 0;  // entries waiting in its request ring
};

// One Engram table's counters (demands of pages; a prefetched page then demanded is a hit).
struct EngramTableStats {
  int layer = 0;
  std::uint64_t rows = 0;
  std::uint64_t pages = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t bytes_read = 0;
  std::uint64_t reads = 0;
  std::uint64_t prefetch_reads = 0;
  std::uint64_t read_errors = 0;
};

struct IoStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t bytes_read = 0;
  std::uint64_t reads = 0;               // records read from disk (demand and prefetch)
  std::uint64_t prefetch_reads = 0;
  std::uint64_t read_errors = 0;
  std::uint64_t evictions = 0;
  std::uint64_t clients_reclaimed = 0;   // dead clients whose pins and rings were freed
  std::uint64_t breaches = 0;            // clients detached for breaking the ring protocol
  std::uint32_t usable_slots = 0;        // set_cache_slots' limit (slots_total when never set)
  std::uint64_t arena_waits = 0;         // demands that had to wait for a free slot
  std::uint32_t demands_waiting = 0;     // demands waiting for a free slot now
  std::uint64_t arena_populated_bytes = 0;  // slot bytes pre-faulted so far
  // Background fill (IoServerConfig::fill): records read with nobody asking, not in reads/bytes_read.
  std::uint64_t fill_records = 0;
  std::uint64_t fill_bytes = 0;
  std::uint64_t fill_total = 0;          // records in the container
  std::string fill_state = "off";        // off, waiting (the usable slots hold fewer), filling, done
  std::array<std::uint64_t, kLatencyBuckets> read_latency_us_log2{};
  std::uint32_t read_queue_depth = 0;    // reads queued or in progress
  bool direct_io = false;
  bool io_uring = false;                 // reads go through io_uring (asked for and allowed)
  std::uint64_t slots_total = 0;
  std::uint64_t slots_used = 0;
  std::uint64_t slots_pinned = 0;
  std::uint64_t record_bytes = 0;
  CachePolicy policy = CachePolicy::lfru;
  std::vector<ClientIoStats> clients;    // attached clients only
  // Engram page pool (empty tables and zero pages when the container has no Engram tables).
  std::uint32_t engram_pool_pages = 0;
  std::uint32_t engram_pool_used = 0;
  std::uint32_t engram_pool_pinned = 0;
  std::uint64_t engram_evictions = 0;
  std::uint32_t engram_queue_depth = 0;  // page reads queued or in progress
  bool engram_direct_io = false;
  std::vector<EngramTableStats> engram;
};

// The JSON form of IoStats: {"totals": {...}, "clients": [...]} (the daemon's `stats` reply).
nlohmann::json stats_json(const IoStats& stats);

class IoServer {
 public:
  // Open the container (banks with the O_DIRECT probe), create both segments (mode 0600) and
  // start the threads. Fails if a live daemon already serves `instance`; stale segments left by
  // a dead one are removed.
  static Result<std::unique_ptr<IoServer>> create(const IoServerConfig& config);
  // Same with the container's description already read (config.container's): an in-process
  // server's client has read it once for everything else, so it is not parsed again here.
  static Result<std::unique_ptr<IoServer>> create(const IoServerConfig& config, const ContainerInfo& info);
  // Same with an injected record reader and no trunk segment (tests, tools). config.container is
  // only used for the identity recorded in the header.
  static Result<std::unique_ptr<IoServer>> create(const IoServerConfig& config, std::unique_ptr<RecordReader> reader);

  // The general form both of the above use. `trunk_fill` writes the trunk image into the new
  // segment (trunk_bytes long); `identity` goes to the arena header (without it, only the path
  // hash of config.container is recorded and clients cannot check files).
  struct Parts {
    std::unique_ptr<RecordReader> reader;
    std::uint64_t trunk_bytes = 0;
    std::function<Status(std::span<std::byte>)> trunk_fill;
    std::optional<ipc::ContainerIdentity> identity;
    // Where the Engram tables (engram-L{n}.bin) are; empty: none are served.
    std::filesystem::path engram_dir;
  };
  static Result<std::unique_ptr<IoServer>> create(const IoServerConfig& config, Parts parts);

  ~IoServer();
  IoServer(const IoServer&) = delete;
  IoServer& operator=(const IoServer&) = delete;

  // Give process `pid` a client block and a fresh ring segment (named with index and generation).
  // Errors: no such process, all in use, no room for the ring segment.
  Result<ClientLease> attach(int pid);
  // Orderly goodbye: unpin everything the client holds, remove its ring segment. Ignored
  // (Errc::argument, no effect) unless pid and generation name the index's current occupant,
  // so a late or replayed detach can never drop a successor.
  Status detach(int client_idx, int pid, std::uint64_t generation);
  struct Occupant {
    int pid = 0;
    std::uint64_t generation = 0;
  };
  // Who holds `client_idx` now; nullopt when it is free.
  [[nodiscard]] std::optional<Occupant> occupant(int client_idx) const;
  // Free the pins, waits and rings of every client whose process is verifiably dead (pidfd, or
  // pid + start time; kill -9 included). Never for a slow or stopped one. The service thread
  // calls it every 200 ms; the control plane may call it too.
  void reclaim_dead_clients();
  // At most `usable_slots` arena slots may hold records (1..slots_total; more is clamped).
  // Lowering it evicts unpinned records above the limit at once and the others as they are
  // released; demands beyond it wait and fail like an arena that is full.
  Status set_cache_slots(std::uint32_t usable_slots);

  [[nodiscard]] IoStats stats() const;
  Status set_policy(CachePolicy policy);
  // Stop the threads and tell clients (their waits fail with "stopped"). Idempotent; the
  // segments stay until destruction.
  void stop();

  [[nodiscard]] const std::string& segment_name() const;        // empty with private memory
  [[nodiscard]] const std::string& trunk_segment_name() const;  // empty without a trunk segment
  [[nodiscard]] const std::string& wake_segment_name() const;
  [[nodiscard]] const std::filesystem::path& shm_dir() const;   // where the segment files are
  [[nodiscard]] bool direct_io_engaged() const;

  struct Impl;

 private:
  explicit IoServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace waste

// IoServer's private state and the functions that work on it, shared by the files of
// ioserver/data_plane/ (one concern each: segments, clients, request service, populator, stats).
// Not part of any public interface.
//
// Trust: every offset, size and count the daemon uses comes from `layout` / the members below,
// computed at creation; nothing is read back from shared memory except what clients may write
// (ring indices and entries, doorbells), and that is checked at each read.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ioserver/engram/engram_page_pool.hpp"
#include "ioserver/engram/engram_page_reader.hpp"
#include "ioserver/expert_cache/expert_cache.hpp"
#include "ioserver/io_server.hpp"
#include "ioserver/nvme/reader_pool.hpp"
#include "shared/ipc/process_liveness.hpp"
#include "shared/ipc/shm_layout.hpp"
#include "shared/ipc/shm_segment.hpp"
#include "shared/ipc/spsc_ring.hpp"

namespace waste {

using namespace std::chrono_literals;

inline constexpr auto kReclaimPeriod = 200ms;
inline constexpr auto kServiceSleep = 100ms;   // futex timeout: bounds heartbeat, reclaim and a lost wake-up
inline constexpr int kServiceSpin = 256;       // polls before sleeping: keeps cached-hit latency low
inline constexpr int kDrainBatch = 64;         // requests taken from one client before looking at the next
inline constexpr auto kBreachLogEvery = 1s;    // at most one breach line per second (the rest are counted)

struct IoServer::Impl {
  struct Client {
    bool attached = false;
    bool breached = false;  // broke the protocol: served no more, freed at the next settle_breaches
    int pid = 0;
    std::uint64_t generation = 0;
    std::optional<ipc::ProcessWatch> watch;  // verifies death; never a heartbeat
    std::vector<std::uint32_t> pinned;       // slots this client pinned (reserved to n_slots)
    std::vector<std::uint32_t> engram_pinned;  // Engram pool slots it pinned since its last engram_release
    std::shared_ptr<ipc::ShmSegment> rings;  // this lease's RingSegmentShm
    std::string ring_name;                   // its file name (empty with private memory)
    std::optional<ipc::RingConsumer> requests;
    std::optional<ipc::RingProducer> completions;
    [[nodiscard]] ipc::RingSegmentShm& ring_shm() const {
      return *reinterpret_cast<ipc::RingSegmentShm*>(rings->data());
    }
  };

  IoServerConfig config;
  std::unique_ptr<RecordReader> reader;
  int n_layers = 0, n_experts = 0;  // the reader's, copied: keys are checked against these
  std::filesystem::path shm_dir;
  std::string segment_name, trunk_name, wake_name;
  std::shared_ptr<ipc::ShmSegment> arena, wake, trunk;
  ipc::ArenaLayout layout;
  ipc::ArenaView view;              // addressed from `layout`, never from the header's offsets
  ipc::WakeShm* wake_shm = nullptr;

  mutable std::mutex mutex;  // guards everything below and every completion ring's producer side
  std::unique_ptr<ExpertCache> cache;
  std::vector<Client> clients;
  // The service thread's lock-free view of each attached client's request ring (any_request_pending).
  // Written under the mutex; a freed client's segment is unmapped only by the service thread
  // (`retired`, dropped at the start of drain), so the pointer it loaded stays valid.
  std::unique_ptr<std::atomic<const ipc::RingShm*>[]> request_ring_of;
  std::vector<std::shared_ptr<ipc::ShmSegment>> retired;
  std::uint64_t hits = 0, misses = 0, bytes_read = 0, reads = 0, prefetch_reads = 0, read_errors = 0,
                reclaimed = 0, arena_waits = 0, breaches = 0;
  std::chrono::steady_clock::time_point last_breach_log{};
  std::uint64_t breaches_unlogged = 0;
  // Demands that found every usable slot pinned or in flight, oldest first. Each still owes its
  // client exactly one completion: served when a slot frees up, or an arena_full error at the deadline.
  struct BlockedDemand {
    int client;
    int layer;
    int expert;
    std::chrono::steady_clock::time_point since;
  };
  std::deque<BlockedDemand> blocked;
  std::array<std::uint64_t, kLatencyBuckets> latency{};

  // Engram pages (engram_service.cpp): the tables, the pool's bookkeeping, its own readers.
  // Null / empty when the container has no Engram tables.
  std::unique_ptr<EngramPageReader> engram_reader;
  std::unique_ptr<EngramPagePool> engram_pool;
  std::vector<std::uint64_t> engram_pages;  // pages per table, for check_request
  struct EngramCounters {
    std::uint64_t hits = 0, misses = 0, bytes_read = 0, reads = 0, prefetch_reads = 0, read_errors = 0;
  };
  std::vector<EngramCounters> engram_counts;  // per table
  std::unique_ptr<ReaderPool> engram_readers;

  std::unique_ptr<ReaderPool> readers;
  std::thread service;
  std::thread populator;  // pre-faults the arena's slot pages in idle time (see populate_arena)
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> populated_bytes{0};
  std::atomic<std::uint32_t> slots_claimed{0};  // written under the mutex, read by the populator
  std::once_flag stop_once;

  [[nodiscard]] ipc::ControlHeaderShm& header() const { return view.header(); }

  // ---- segments.cpp ----------------------------------------------------------------------------
  // Create the arena, wake and (if any) trunk segments after the free-space check.
  Status create_segments(const Parts& parts);
  // A fresh ring segment for (c, generation), initialised; the client maps it by name.
  Result<std::shared_ptr<ipc::ShmSegment>> create_ring_segment(int c, std::uint64_t generation, std::string& name);
  void remove_segments();

  // ---- request_service.cpp (mutex held unless noted) -------------------------------------------
  bool key_valid(int layer, int expert) const;
  void push_completion(int c, const ipc::Completion& completion);
  void push_error(int c, int layer, int expert, ipc::CompletionError code, const std::string& text);
  bool try_demand(int c, int layer, int expert);
  std::string arena_full_text(int c, int layer, int expert, const std::string& why) const;
  void handle_demand(int c, int layer, int expert);
  void retry_blocked();
  void expire_blocked(std::chrono::steady_clock::time_point now);
  void drop_blocked(int c, std::optional<int> layer = std::nullopt);
  void handle_prefetch(int c, int layer, int expert);
  void handle_release(int c, int layer);
  bool drain();                      // takes the mutex
  bool any_request_pending() const;  // no lock: reads ring indices only
  void on_read_done(const ReaderPool::Job& job, const Status& status, std::chrono::nanoseconds elapsed);  // takes the mutex
  void service_loop();

  // ---- engram_service.cpp (mutex held unless noted) ------------------------------------------
  void push_engram_completion(int c, const ipc::EngramCompletion& completion);
  void push_engram_error(int c, int table, std::uint64_t page, std::uint32_t tag, ipc::CompletionError code,
                         const std::string& text);
  void handle_engram_demand(int c, int table, std::uint64_t page, std::uint32_t tag);
  void handle_engram_prefetch(int c, int table, std::uint64_t page);
  void handle_engram_release(int c);
  void on_engram_read_done(const ReaderPool::Job& job, const Status& status);  // takes the mutex

  // ---- clients.cpp (mutex held) ----------------------------------------------------------------
  void free_client(int c);
  // Client c broke the protocol: logs `why` (rate-limited), tells the client, serves it no more.
  // The detach itself happens in settle_breaches, at a point where no caller iterates over the
  // blocked demands or the waiters (breach can be reached from inside those loops).
  void breach(int c, const std::string& why);
  void settle_breaches();
  void reclaim_dead_locked();

  // ---- fill.cpp (mutex held) ---------------------------------------------------------------------
  // The background fill's cursor walks every (layer, expert) of the container once, as
  // layer * n_experts + expert; a resident record is skipped, an absent one read into a free slot.
  std::uint64_t fill_next = 0;
  std::uint64_t fill_total = 0;        // records in the container (set at creation)
  bool fill_inflight = false;          // at most one fill read at a time
  // The last client request drained (or the server's creation): the fill waits config.fill_idle
  // after it.
  std::chrono::steady_clock::time_point last_request = std::chrono::steady_clock::now();
  std::atomic<bool> fill_pending{false};  // config.fill and the cursor not at the end (service loop, no lock)
  std::uint64_t fill_records = 0, fill_bytes = 0;
  // Issue the next fill read when the fill is on, the usable slots hold every record, no demand
  // waits for a slot and the readers hold no more than `own_reads` jobs (1 from on_read_done: the
  // read that just landed). Never evicts.
  void maybe_fill(std::size_t own_reads);
  [[nodiscard]] const char* fill_state() const;

  // ---- populator.cpp ---------------------------------------------------------------------------
  static constexpr std::uint64_t kPopulateAhead = std::uint64_t{256} << 20;
  void populate_arena();
  void note_claimed(std::uint32_t slot);

  void stop();
};

}  // namespace waste

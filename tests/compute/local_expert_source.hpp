// TEST-ONLY. No production path uses this class: `--in-process` and Engine::open without a
// daemon run the daemon's own IoServer in the process (compute/io/in_process_plane.hpp). It
// stays as a test fixture: a simple second ExpertSource the forward-pass tests wrap.
//
// LocalExpertSource: an in-process ExpertSource. Records are read with one aligned pread each
// (ExpertBanks::read_record) into 4 KiB-aligned buffers and kept in a bounded LRU cache keyed by
// (layer, expert). Capacity is counted in records; 0 disables the cache (every demand request is
// a miss read into a private buffer). Records pinned by the current request are never evicted;
// when every cache slot is pinned or busy the record goes to a private buffer instead.
//
// Read-ahead (waste-lessons.md §1.1): with reader_threads > 0, request() queues every missing
// record at once on its own reader threads and returns; acquire()/acquire_next() wait only for
// the record asked for, so compute on the first record that lands overlaps the other reads.
// reader_threads 0 reads synchronously inside request(). prefetch() queues speculative reads
// into unpinned cache slots (only with readers and a cache); they are not misses, and a later
// request that finds them (landed or still in flight) counts a hit.
//
// Resident mode loads every record of the container at open (compute-only benchmarks).
//
// Threading: the public calls come from one compute thread (see expert_source.hpp); the reader
// threads only fill buffers of slots marked in flight and publish them under mutex_.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "compute/expert_source.hpp"
#include "shared/container/container.hpp"
#include "shared/container/expert_bank.hpp"

namespace waste {

struct LocalSourceOptions {
  bool direct_io = true;
  bool verify_records = false;
  std::size_t cache_records = 0;
  int reader_threads = 2;   // read-ahead threads, 0 = synchronous reads in request(); at most 8
  bool resident = false;    // read every record at open and keep it (cache_records ignored)
};

class LocalExpertSource final : public ExpertSource {
 public:
  static constexpr int kMaxReaderThreads = 8;

  static Result<std::unique_ptr<LocalExpertSource>> open(const ContainerInfo& info, LocalSourceOptions options);
  ~LocalExpertSource() override;
  LocalExpertSource(const LocalExpertSource&) = delete;
  LocalExpertSource& operator=(const LocalExpertSource&) = delete;

  Status request(int layer, std::span<const int> experts) override;
  Result<ExpertView> acquire(int layer, int expert) override;
  Result<ReadyExpert> acquire_next(int layer) override;
  void release_layer(int layer) override;
  void prefetch(int layer, std::span<const int> experts) override;
  [[nodiscard]] ExpertSourceStats stats() const override;
  [[nodiscard]] bool direct_io() const override { return banks_.direct_io_engaged(); }
  [[nodiscard]] std::uint64_t cache_capacity_records() const override { return capacity_; }

  [[nodiscard]] std::size_t capacity() const { return capacity_; }
  [[nodiscard]] std::size_t cached() const { return index_.size(); }
  [[nodiscard]] int reader_threads() const { return int(readers_.size()); }

 private:
  enum class SlotState : std::uint8_t { empty, in_flight, ready, failed };
  struct Slot {
    AlignedBuffer buffer;
    int layer = -1;
    int expert = -1;
    std::uint64_t last_use = 0;
    std::uint64_t landed = 0;   // landing sequence number (acquire_next order)
    int pins = 0;
    SlotState state = SlotState::empty;   // written by readers under mutex_
    std::optional<Error> error;           // of a failed read
  };
  struct Held {
    int layer;
    int expert;
    int slot;
    int index;      // position in the request
    bool returned;  // handed out by acquire_next
  };

  LocalExpertSource(ExpertBanks banks, ExpertGeometry geometry, const Manifest& manifest, std::size_t capacity,
                    int reader_threads);
  static std::uint64_t key_of(int layer, int expert) { return std::uint64_t(layer) << 32 | std::uint32_t(expert); }
  bool reusable(const Slot& s) const { return s.pins == 0 && s.state != SlotState::in_flight; }
  int pick_victim();
  int pick_private();
  // Mark the slot in flight for (layer, expert) and read it now (no readers) or queue it.
  Status start_read(int slot, int layer, int expert);
  Status load_all();
  void reader_loop();
  Result<ExpertView> view_of(const Slot& s) const;

  ExpertBanks banks_;
  ExpertGeometry geometry_;
  int n_layers_;
  int n_experts_;
  std::size_t capacity_;
  std::vector<bool> moe_layer_;
  std::vector<Slot> slots_;   // [0, capacity_) cache slots, then private buffers grown on demand
  std::unordered_map<std::uint64_t, int> index_;
  std::vector<Held> held_;
  std::uint64_t clock_ = 0;
  std::uint64_t landed_seq_ = 0;   // guarded by mutex_
  ExpertSourceStats stats_;        // compute thread only, except bytes_read_
  std::atomic<std::uint64_t> bytes_read_{0};

  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable landed_cv_;
  std::vector<int> queue_;         // slot ids to read, FIFO from queue_head_; guarded by mutex_
  std::size_t queue_head_ = 0;
  bool stop_ = false;
  std::vector<std::thread> readers_;  // last: started after everything they touch exists
};

}  // namespace waste

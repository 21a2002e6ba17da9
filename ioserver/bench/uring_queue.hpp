// Records read by ONE thread through one io_uring ring with up to `depth` reads in flight: the
// queue-depth reader the daemon's thread-per-read pool is measured against (`waste bench
// --reader-sweep`, column "uring_queue"). A thread that wakes reaps every completion that landed
// meanwhile and refills the ring in one submit, so on a loaded machine a late wake-up costs one
// delay per batch rather than one per record per thread. Not yet wired into the data plane.
//
// Reads go to the caller's slot buffers (slot < depth, 4 KiB aligned, record_bytes long): a slot
// is handed to a new read only after its previous read completed and `done` returned. Headers
// (and CRCs when the banks verify) are checked by ExpertBanks::check_record: errors read as
// ExpertBanks::read_record's. The banks and the slot buffers must outlive the queue.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>

#include "shared/container/expert_bank.hpp"
#include "shared/result.hpp"

namespace waste {

class UringQueue {
 public:
  struct Key {
    int layer = 0;
    int expert = 0;
  };
  using KeyOf = std::function<Key(std::size_t index)>;
  using BufferOf = std::function<std::span<std::byte>(unsigned slot)>;
  using Done = std::function<void(std::size_t index, unsigned slot, const Status& status)>;

  // Errc::io naming io_uring_queue_init's error where the kernel refuses io_uring.
  static Result<UringQueue> create(const ExpertBanks& banks, unsigned depth);
  UringQueue(UringQueue&&) noexcept;
  UringQueue& operator=(UringQueue&&) noexcept;
  ~UringQueue();

  // Reads records key_of(0) .. key_of(count - 1), at most depth() in flight; done() runs on this
  // thread once per read, in completion order. A record's own error (bad key, read error, short
  // read, bad header) goes to its done() only. A ring error (failed submit or wait) returns at once:
  // the queue is then unusable, and the kernel cancels the reads still in flight when it is
  // destroyed (so the slot buffers must outlive it).
  Status run(std::size_t count, const KeyOf& key_of, const BufferOf& buffer_of, const Done& done);
  [[nodiscard]] unsigned depth() const;

 private:
  struct Impl;
  explicit UringQueue(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace waste

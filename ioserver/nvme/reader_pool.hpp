// A fixed pool of reader threads: each job is one record read (one pread) into one arena slot.
// The queue is a preallocated ring (capacity = arena slots: a slot has at most one read in
// flight), guarded by a daemon-private mutex; no allocation after construction.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "ioserver/nvme/record_reader.hpp"

namespace waste {

class ReaderPool {
 public:
  struct Job {
    std::uint32_t slot = 0;
    int layer = 0;
    int expert = 0;
    int client = -1;               // who asked (bytes are accounted to it); -1 none
    std::uint64_t generation = 0;  // that client's lease generation
    bool prefetch = false;
    bool fill = false;             // the background fill's read (nobody asked; client -1)
  };
  // Runs on a reader thread after each read; `elapsed` is the pread's wall time.
  using Done = std::function<void(const Job&, const Status&, std::chrono::nanoseconds elapsed)>;
  using BufferOf = std::function<std::span<std::byte>(std::uint32_t slot)>;

  ReaderPool(const RecordReader& reader, int threads, std::size_t capacity, BufferOf buffer_of, Done done);
  ~ReaderPool();
  ReaderPool(const ReaderPool&) = delete;
  ReaderPool& operator=(const ReaderPool&) = delete;

  // False only when the queue is full (cannot happen with capacity = slots) or stopped.
  bool submit(const Job& job);
  [[nodiscard]] std::size_t depth() const;  // queued + being read
  // Finish the reads in progress, drop the queued ones, join the threads. Idempotent.
  void stop();

 private:
  void run();

  const RecordReader& reader_;
  BufferOf buffer_of_;
  Done done_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Job> queue_;
  std::size_t head_ = 0, count_ = 0, active_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace waste

// Fork-join pool for row-parallel kernels (waste-v0-reference.md §2, "Thread pool").
//
// parallel_for(n, min_chunk, fn) runs fn(begin, end) over chunks of [0, n):
//   chunk = ceil(n / threads), raised to >= min_chunk and rounded up to a multiple of min_chunk;
//   serial (one fn(0, n) call on the caller) when n <= min_chunk or the pool has one thread.
// Chunks are handed out dynamically and the caller participates. Splitting is the only thing
// that depends on the thread count: kernels compute each output row inside one chunk with the
// same arithmetic, so results are identical for any pool size.
//
// Waiting: a worker that finishes a job, and a caller that finishes its own chunks, spin for up
// to kSpinMicros before they sleep on a condition variable. Decode issues a few hundred short
// jobs per token back to back; sleeping between them cost a futex wake (an inter-processor
// interrupt, slow in a VM) per job and per join (docs/LEARNED.md).
//
// Thread safety: parallel_for may be called from any thread; concurrent calls are serialised
// (one job at a time). A parallel_for issued from inside fn runs serially on that thread
// instead of deadlocking. fn must not throw (it may run on a worker thread).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "compute/runtime/function_ref.hpp"

namespace waste {

class ThreadPool {
 public:
  static constexpr int kMaxThreads = 64;
  static constexpr int kSpinMicros = 50;

  // n_threads counts the caller; 0 = std::thread::hardware_concurrency(); clamped to [1, 64].
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  [[nodiscard]] int size() const { return n_threads_; }

  using RangeFn = FunctionRef<void(std::int64_t, std::int64_t)>;
  void parallel_for(std::int64_t n, std::int64_t min_chunk, RangeFn fn);

  // The chunk length parallel_for uses for (n, min_chunk) on this pool (tests, tuning).
  [[nodiscard]] std::int64_t chunk_size(std::int64_t n, std::int64_t min_chunk) const;

 private:
  struct Job {
    const RangeFn* fn = nullptr;
    std::int64_t n = 0;
    std::int64_t chunk = 0;
    std::int64_t n_chunks = 0;
    std::atomic<std::int64_t> next{0};       // next chunk index to claim
    std::atomic<std::int64_t> remaining{0};  // chunks not yet finished
  };

  void worker_loop();
  void run_chunks();

  int n_threads_;
  std::vector<std::jthread> workers_;
  std::mutex submit_mutex_;  // one job at a time
  std::mutex mutex_;         // guards stop_ and the job fields; generation_ and active_ change under it
  std::condition_variable wake_;
  std::condition_variable done_;
  // Atomic so that a worker (waiting for the next job) and the caller (waiting for a job's end)
  // can spin on them for a few microseconds before sleeping; they still change under mutex_,
  // so the condition-variable waits keep their usual predicates.
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> active_{0};  // workers currently inside a job
  bool stop_ = false;
  Job job_;
};

}  // namespace waste

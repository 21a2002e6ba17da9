#include "compute/runtime/thread_pool.hpp"

#include <algorithm>
#include <chrono>

namespace waste {
namespace {

// Set on pool workers and on a caller while it runs a job: nested parallel_for goes serial.
thread_local bool t_inside_pool = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() or about kSpinMicros have passed; true if done() became true.
template <class Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(ThreadPool::kSpinMicros);
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
  n_threads_ = std::clamp(n_threads, 1, kMaxThreads);
  workers_.reserve(static_cast<std::size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  workers_.clear();  // jthread joins
}

std::int64_t ThreadPool::chunk_size(std::int64_t n, std::int64_t min_chunk) const {
  min_chunk = std::max<std::int64_t>(min_chunk, 1);
  std::int64_t chunk = (n + n_threads_ - 1) / n_threads_;
  chunk = std::max(chunk, min_chunk);
  return (chunk + min_chunk - 1) / min_chunk * min_chunk;
}

void ThreadPool::parallel_for(std::int64_t n, std::int64_t min_chunk, RangeFn fn) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n <= std::max<std::int64_t>(min_chunk, 1) || t_inside_pool) {
    fn(0, n);
    return;
  }
  const std::int64_t chunk = chunk_size(n, min_chunk);
  const std::int64_t n_chunks = (n + chunk - 1) / chunk;
  if (n_chunks == 1) {
    fn(0, n);
    return;
  }

  std::lock_guard submit(submit_mutex_);
  {
    std::unique_lock lock(mutex_);
    // A worker that woke late for the previous job may still be leaving it.
    done_.wait(lock, [this] { return active_ == 0; });
    job_.fn = &fn;
    job_.n = n;
    job_.chunk = chunk;
    job_.n_chunks = n_chunks;
    job_.next.store(0, std::memory_order_relaxed);
    job_.remaining.store(n_chunks, std::memory_order_relaxed);
    // release: a worker that sees the new generation while spinning also sees the job fields
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();

  t_inside_pool = true;
  run_chunks();
  t_inside_pool = false;

  // remaining's release decrements pair with this acquire load: every chunk's writes are visible.
  spin_until([this] {
    return job_.remaining.load(std::memory_order_acquire) == 0 && active_.load(std::memory_order_acquire) == 0;
  });
  std::unique_lock lock(mutex_);
  // remaining's release decrements pair with this acquire load: every chunk's writes are visible.
  done_.wait(lock, [this] {
    return job_.remaining.load(std::memory_order_acquire) == 0 && active_ == 0;
  });
  job_.fn = nullptr;
}

void ThreadPool::run_chunks() {
  for (;;) {
    const std::int64_t index = job_.next.fetch_add(1, std::memory_order_relaxed);
    if (index >= job_.n_chunks) return;
    const std::int64_t begin = index * job_.chunk;
    const std::int64_t end = std::min(begin + job_.chunk, job_.n);
    (*job_.fn)(begin, end);
    if (job_.remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mutex_);  // so the caller cannot miss the notification
      done_.notify_all();
    }
  }
}

void ThreadPool::worker_loop() {
  t_inside_pool = true;
  std::uint64_t seen = 0;
  for (;;) {
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (job_.fn == nullptr) continue;  // woke after that job was already finished
      ++active_;
    }
    run_chunks();
    {
      std::lock_guard lock(mutex_);
      active_.fetch_sub(1, std::memory_order_release);
    }
    done_.notify_all();
  }
}

}  // namespace waste

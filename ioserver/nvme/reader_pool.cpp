#include "ioserver/nvme/reader_pool.hpp"

namespace waste {

ReaderPool::ReaderPool(const RecordReader& reader, int threads, std::size_t capacity, BufferOf buffer_of, Done done)
    : reader_(reader), buffer_of_(std::move(buffer_of)), done_(std::move(done)), queue_(capacity) {
  threads_.reserve(std::size_t(threads));
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

ReaderPool::~ReaderPool() { stop(); }

bool ReaderPool::submit(const Job& job) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || count_ == queue_.size()) return false;
    queue_[(head_ + count_) % queue_.size()] = job;
    ++count_;
  }
  cv_.notify_one();
  return true;
}

std::size_t ReaderPool::depth() const {
  std::lock_guard lock(mutex_);
  return count_ + active_;
}

void ReaderPool::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    count_ = 0;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void ReaderPool::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || count_ > 0; });
      if (stopping_) return;
      job = queue_[head_];
      head_ = (head_ + 1) % queue_.size();
      --count_;
      ++active_;
    }
    const auto start = std::chrono::steady_clock::now();
    const Status status = reader_.read(job.layer, job.expert, buffer_of_(job.slot));
    const auto elapsed = std::chrono::steady_clock::now() - start;
    done_(job, status, std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed));
    std::lock_guard lock(mutex_);
    --active_;
  }
}

}  // namespace waste

// FaultyRecordReader: the ioserver's reader fault-injection hook for tests. It wraps another
// RecordReader and makes the next read of one record fail the way a real one can: EIO from the
// device, a short read that leaves part of the slot written, or a failed write into the arena
// (ENOSPC on a full tmpfs, EFAULT on an unmappable page) that leaves garbage in it.
#pragma once

#include <condition_variable>
#include <cstring>
#include <optional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "ioserver/nvme/record_reader.hpp"

namespace waste::test {

enum class Fault { eio, short_read, arena_enospc, arena_efault };

class FaultyRecordReader : public RecordReader {
 public:
  explicit FaultyRecordReader(std::unique_ptr<RecordReader> inner) : inner_(std::move(inner)) {}

  // The next `times` reads of (layer, expert) fail with `fault`.
  void inject(int layer, int expert, Fault fault, int times = 1) {
    std::lock_guard lock(mutex_);
    faults_[{layer, expert}] = {fault, times};
  }

  // While closed, every read waits (so several demands can join one failing read).
  void set_gate(bool closed) {
    std::lock_guard lock(mutex_);
    gated_ = closed;
    cv_.notify_all();
  }

  Status read(int layer, int expert, std::span<std::byte> buffer) const override {
    std::optional<Fault> fault;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return !gated_; });
      auto it = faults_.find({layer, expert});
      if (it != faults_.end() && it->second.second > 0) {
        fault = it->second.first;
        if (--it->second.second == 0) faults_.erase(it);
      }
    }
    if (!fault) return inner_->read(layer, expert, buffer);
    const std::string who = "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) + ": ";
    switch (*fault) {
      case Fault::eio:
        return make_error(Errc::io, who + "pread: Input/output error (EIO)");
      case Fault::short_read: {
        // Half the record lands (real bytes), the rest of the slot keeps whatever was there.
        (void)inner_->read(layer, expert, buffer);
        std::memset(buffer.data() + buffer.size() / 2, 0xEE, buffer.size() - buffer.size() / 2);
        return make_error(Errc::io, who + "short read (got " + std::to_string(buffer.size() / 2) + " of " +
                                        std::to_string(buffer.size()) + " bytes)");
      }
      case Fault::arena_enospc:
        std::memset(buffer.data(), 0xAA, buffer.size());
        return make_error(Errc::io, "writing into the arena: No space left on device (ENOSPC)");
      case Fault::arena_efault:
        std::memset(buffer.data(), 0x55, buffer.size());
        return make_error(Errc::io, "writing into the arena: Bad address (EFAULT)");
    }
    return ok();
  }
  std::uint64_t record_bytes() const override { return inner_->record_bytes(); }
  bool direct_io_engaged() const override { return inner_->direct_io_engaged(); }
  int n_layers() const override { return inner_->n_layers(); }
  int n_experts() const override { return inner_->n_experts(); }
  bool has_layer(int layer) const override { return inner_->has_layer(layer); }

 private:
  std::unique_ptr<RecordReader> inner_;
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  bool gated_ = false;
  mutable std::map<std::pair<int, int>, std::pair<Fault, int>> faults_;
};

}  // namespace waste::test

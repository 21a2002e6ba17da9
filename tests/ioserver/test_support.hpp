// Helpers shared by the ioserver tests: synthetic containers, an oracle pread of records,
// injectable readers, unique instance names, a bounded wait (eventually) and the pattern check (exact).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "ioserver/io_server.hpp"
#include "ioserver/nvme/record_reader.hpp"
#include "shared/container/container.hpp"
#include "shared/synth/synth.hpp"

namespace waste::test {

inline std::string unique_instance(const std::string& what) {
  static std::atomic<int> counter{0};
  return "t" + std::to_string(::getpid()) + "-" + what + "-" + std::to_string(counter++);
}

// Bounded wait for a condition another thread or process makes true: polls every 5 ms and
// returns the condition's value at the end (a bound, never a timing assertion).
template <class Pred>
bool eventually(Pred&& pred, std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

// A synthetic container under the build tree, built once per (experts) and reused.
inline std::filesystem::path synth_container(int n_experts = 8) {
  const auto root = std::filesystem::path(WASTE_BINARY_DIR) / "test-data";
  const auto dir = root / ("ioserver-tiny-e" + std::to_string(n_experts));
  if (std::filesystem::exists(dir / "manifest.json")) return dir;
  auto preset = synth::load_preset("tiny");
  REQUIRE(preset);
  (*preset)["num_experts"] = n_experts;
  synth::SynthRequest request;
  request.preset = "tiny";
  request.seed = 7;
  auto spec = synth::make_spec(*preset, request);
  REQUIRE(spec);
  // Built under a private name and renamed into place, so parallel test processes never see half a container.
  const auto tmp = root / (dir.filename().string() + ".tmp" + std::to_string(::getpid()));
  std::filesystem::create_directories(tmp);
  auto written = synth::write_container(*spec, tmp);
  if (!written) FAIL(written.error().message);
  std::error_code ec;
  std::filesystem::rename(tmp, dir, ec);
  if (ec) std::filesystem::remove_all(tmp);  // another process won the race
  REQUIRE(std::filesystem::exists(dir / "manifest.json"));
  return dir;
}

// The oracle: one plain pread of record (layer, expert) from the bank file.
inline std::vector<std::byte> pread_record(const std::filesystem::path& dir, int layer, int expert,
                                           std::uint64_t record_bytes) {
  std::vector<std::byte> out(record_bytes);
  const auto path = dir / ("experts-L" + std::to_string(layer) + ".bin");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const ssize_t n = ::pread(fd, out.data(), record_bytes, off_t(std::uint64_t(expert) * record_bytes));
  ::close(fd);
  if (n != ssize_t(record_bytes)) return {};
  return out;
}

// Records are a pure function of (layer, expert, byte index): a reader without files.
inline std::byte pattern_byte(int layer, int expert, std::size_t i) {
  return std::byte((layer * 131 + expert * 17 + i * 7 + (i >> 8)) & 0xFF);
}

// Every byte of `bytes` is PatternReader's record (layer, expert).
inline bool exact(std::span<const std::byte> bytes, int layer, int expert) {
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != pattern_byte(layer, expert, i)) return false;
  }
  return true;
}

class PatternReader : public RecordReader {
 public:
  PatternReader(int n_layers, int n_experts, std::uint64_t record_bytes)
      : n_layers_(n_layers), n_experts_(n_experts), record_bytes_(record_bytes) {}
  Status read(int layer, int expert, std::span<std::byte> buffer) const override {
    {
      std::unique_lock lock(mutex_);
      ++reads_[{layer, expert}];
      ++total_reads_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return !gated_; });
      if (fail_layer_ == layer && fail_expert_ == expert) {
        return make_error(Errc::io, "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                                        ": bad magic 0x00000000");
      }
    }
    for (std::size_t i = 0; i < record_bytes_; ++i) buffer[i] = pattern_byte(layer, expert, i);
    return ok();
  }
  std::uint64_t record_bytes() const override { return record_bytes_; }
  bool direct_io_engaged() const override { return false; }
  int n_layers() const override { return n_layers_; }
  int n_experts() const override { return n_experts_; }
  bool has_layer(int layer) const override { return layer >= 0 && layer < n_layers_; }

  void set_gate(bool closed) {
    std::lock_guard lock(mutex_);
    gated_ = closed;
    cv_.notify_all();
  }
  void fail_on(int layer, int expert) {
    std::lock_guard lock(mutex_);
    fail_layer_ = layer;
    fail_expert_ = expert;
  }
  int reads_of(int layer, int expert) const {
    std::lock_guard lock(mutex_);
    const auto it = reads_.find({layer, expert});
    return it == reads_.end() ? 0 : it->second;
  }
  int total_reads() const {
    std::lock_guard lock(mutex_);
    return total_reads_;
  }

 private:
  int n_layers_, n_experts_;
  std::uint64_t record_bytes_;
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  mutable std::map<std::pair<int, int>, int> reads_;
  mutable int total_reads_ = 0;
  bool gated_ = false;
  int fail_layer_ = -1, fail_expert_ = -1;
};

inline IoServerConfig pattern_config(const std::string& what, std::uint64_t slots) {
  IoServerConfig config;
  config.container = "/nonexistent/pattern";
  config.instance = unique_instance(what);
  config.arena_slots = slots;
  config.reader_threads = 2;
  config.max_clients = 8;
  return config;
}

}  // namespace waste::test

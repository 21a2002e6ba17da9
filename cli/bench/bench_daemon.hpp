// A waste-ioserver one benchmark starts for itself (`waste bench --io-only`, `--clients N`):
// instance "bench-PID", the benchmark's budget and client reservation, no background fill
// (--fill off: the benchmark counts only the reads it causes), stopped (drained) when destroyed. When a daemon already serves the container, `start` returns one that is not owned
// (its budget wins) and never stops it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/result.hpp"

namespace waste::cli::bench {

class BenchDaemon {
 public:
  // `extra_args` go to waste-ioserver as given ("--policy", "lru"); unused when one already serves.
  static Result<BenchDaemon> start(const std::filesystem::path& model, const std::string& budget, int clients,
                                   const std::vector<std::string>& extra_args = {});
  BenchDaemon(BenchDaemon&&) noexcept;
  BenchDaemon& operator=(BenchDaemon&&) noexcept;
  ~BenchDaemon();
  [[nodiscard]] bool owned() const { return owned_; }
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] const std::string& instance() const { return instance_; }
  [[nodiscard]] std::uint64_t budget_bytes() const { return budget_bytes_; }
  [[nodiscard]] std::uint64_t arena_slots() const { return arena_slots_; }
  // The daemon's `stats` reply.
  [[nodiscard]] Result<nlohmann::json> stats() const;
  Status stop();

 private:
  BenchDaemon() = default;
  std::string socket_, instance_;
  pid_t pid_ = 0;
  std::uint64_t budget_bytes_ = 0, arena_slots_ = 0;
  bool owned_ = false;
};

}  // namespace waste::cli::bench

// Progress of one conversion phase (layers, experts, trunk) on stderr: a redrawn bar with rate
// and ETA on a terminal; otherwise (a log, a pipe) one line per phase when it ends, "PHASE
// DONE/TOTAL" (an aborted phase shows how far it got); nothing when quiet.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace waste::convert {

enum class ProgressMode : std::uint8_t { quiet, plain, terminal };

ProgressMode detect_progress_mode(bool quiet);  // terminal when stderr is a tty

class Progress {
 public:
  Progress(ProgressMode mode, std::string phase, std::int64_t total, std::FILE* out = stderr);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void advance(std::int64_t n = 1);
  void finish();
  // The line drawn for `done` of `total` after `seconds` (tests).
  static std::string format(const std::string& phase, std::int64_t done, std::int64_t total, double seconds, bool bar);

 private:
  ProgressMode mode_;
  std::string phase_;
  std::int64_t total_, done_ = 0;
  bool finished_ = false;
  std::FILE* out_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace waste::convert

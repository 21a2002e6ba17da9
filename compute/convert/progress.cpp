#include "compute/convert/progress.hpp"

#include <unistd.h>

#include <algorithm>

namespace waste::convert {

ProgressMode detect_progress_mode(bool quiet) {
  if (quiet) return ProgressMode::quiet;
  return ::isatty(STDERR_FILENO) ? ProgressMode::terminal : ProgressMode::plain;
}

Progress::Progress(ProgressMode mode, std::string phase, std::int64_t total, std::FILE* out)
    : mode_(mode), phase_(std::move(phase)), total_(std::max<std::int64_t>(total, 0)), out_(out),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() { finish(); }

std::string Progress::format(const std::string& phase, std::int64_t done, std::int64_t total, double seconds, bool bar) {
  char buf[256];
  const double rate = seconds > 0 ? double(done) / seconds : 0.0;
  const double eta = rate > 0 ? double(total - done) / rate : 0.0;
  std::string b;
  if (bar) {
    const int width = 24;
    const int fill = total > 0 ? int(double(width) * double(done) / double(total)) : width;
    b = "[" + std::string(std::size_t(fill), '#') + std::string(std::size_t(width - fill), ' ') + "] ";
  }
  std::snprintf(buf, sizeof buf, "%s%s %lld/%lld  %.1f/s  ETA %.0fs", b.c_str(), phase.c_str(), (long long)done,
                (long long)total, rate, eta);
  return buf;
}

void Progress::advance(std::int64_t n) {
  done_ = std::min(total_, done_ + n);
  if (mode_ == ProgressMode::quiet) return;
  const auto now = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(now - start_).count();
  if (mode_ == ProgressMode::terminal) {
    if (done_ < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    std::fprintf(out_, "\r%s\x1b[K", format(phase_, done_, total_, s, true).c_str());
    std::fflush(out_);
  }
  // plain: nothing until finish(), so a log gets one line per phase, not one per update.
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (mode_ == ProgressMode::terminal && total_ > 0) std::fprintf(out_, "\n");
  if (mode_ == ProgressMode::plain) {
    std::fprintf(out_, "%s %lld/%lld\n", phase_.c_str(), (long long)done_, (long long)total_);
    std::fflush(out_);
  }
}

}  // namespace waste::convert

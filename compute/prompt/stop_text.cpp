#include "compute/prompt/stop_text.hpp"

#include <algorithm>
#include <utility>

namespace waste {

namespace {
// Length of the UTF-8 sequence a lead byte starts (1 for stray continuation/invalid bytes, so
// invalid input still flows through instead of being held forever).
std::size_t utf8_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 1;
}
}  // namespace

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  std::size_t complete = 0;
  while (complete < pending_.size()) {
    const std::size_t n = utf8_length(static_cast<unsigned char>(pending_[complete]));
    if (complete + n > pending_.size()) break;
    complete += n;
  }
  std::string out = pending_.substr(0, complete);
  pending_.erase(0, complete);
  return out;
}

std::string Utf8Stream::flush() { return std::exchange(pending_, {}); }

StopTextStream::StopTextStream(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopTextStream::push(std::string_view bytes) {
  if (stopped_) return {};
  held_ += utf8_.push(bytes);
  std::size_t first = std::string::npos;
  for (const auto& stop : stops_) first = std::min(first, held_.find(stop));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Keep the longest tail of held_ that is a proper prefix of some stop text.
  std::size_t keep = 0;
  for (const auto& stop : stops_) {
    for (std::size_t n = std::min(stop.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, stop, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopTextStream::finish() {
  if (stopped_) return {};
  std::string out = std::exchange(held_, {});
  return out + utf8_.flush();
}

}  // namespace waste

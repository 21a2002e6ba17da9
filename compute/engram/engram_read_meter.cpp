#include "compute/engram/engram_read_meter.hpp"

#include <chrono>
#include <cstdlib>
#include <string>

namespace waste::engram {

Result<bool> parse_engram_readahead(std::string_view text, std::string_view what) {
  if (text == "on" || text == "1") return true;
  if (text == "off" || text == "0") return false;
  return make_error(Errc::argument, std::string(what) + ": '" + std::string(text) + "' is not on or off (1 or 0)");
}

Result<bool> engram_readahead_setting(std::optional<bool> option) {
  if (option) return *option;
  const char* env = std::getenv("WASTE_ENGRAM_READAHEAD");
  if (env == nullptr || *env == '\0') return true;
  return parse_engram_readahead(env, "WASTE_ENGRAM_READAHEAD");
}

MeteredEngramRows::MeteredEngramRows(std::unique_ptr<EngramRowReader> inner, bool readahead)
    : inner_(std::move(inner)), readahead_(readahead) {}

Status MeteredEngramRows::read_rows(std::size_t layer_index, std::span<const std::uint64_t> rows, std::span<float> out) {
  const auto start = std::chrono::steady_clock::now();
  Status done = inner_->read_rows(layer_index, rows, out);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  wait_ns_.fetch_add(std::uint64_t(ns), std::memory_order_relaxed);
  rows_asked_.fetch_add(rows.size(), std::memory_order_relaxed);
  return done;
}

void MeteredEngramRows::prefetch(std::size_t layer_index, std::span<const std::uint64_t> rows) {
  if (readahead_) {
    inner_->prefetch(layer_index, rows);
  } else {
    dropped_.fetch_add(rows.size(), std::memory_order_relaxed);
  }
}

EngramRowStats MeteredEngramRows::stats() const {
  EngramRowStats s = inner_->stats();
  s.rows_asked = rows_asked_.load(std::memory_order_relaxed);
  s.wait_seconds = double(wait_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return s;
}

}  // namespace waste::engram

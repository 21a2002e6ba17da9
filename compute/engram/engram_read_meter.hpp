// The engine's Engram read-ahead switch and counters: MeteredEngramRows wraps whichever
// EngramRowReader the engine opened (the in-process EngramRowSource or the daemon's rows).
//
//   read-ahead on   prefetch() passes through: EngramStage::begin requests a pass's rows before
//                   the layer loop reaches the first Engram layer (the default).
//   read-ahead off  prefetch() is dropped: rows are read only when an Engram layer asks for them
//                   (read_rows), for A/B measurements. The rows, hence the logits, are the same.
//
// Either way read_rows is counted (rows asked) and timed (the layer loop's wait for rows);
// stats() is the wrapped reader's counters with rows_asked and wait_seconds filled in.
// The switch is decided once: EngineOptions::engram_readahead, else $WASTE_ENGRAM_READAHEAD
// (engram_readahead_setting), else on.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "compute/engram/engram_rows.hpp"
#include "shared/result.hpp"

namespace waste::engram {

// "on" / "1" -> true, "off" / "0" -> false; anything else:
// "<what>: 'maybe' is not on or off (1 or 0)".
Result<bool> parse_engram_readahead(std::string_view text, std::string_view what);

// The read-ahead an engine uses: `option` when set, else $WASTE_ENGRAM_READAHEAD when set and
// not empty (parsed as above, what = "WASTE_ENGRAM_READAHEAD"), else on.
Result<bool> engram_readahead_setting(std::optional<bool> option);

class MeteredEngramRows final : public EngramRowReader {
 public:
  MeteredEngramRows(std::unique_ptr<EngramRowReader> inner, bool readahead);

  [[nodiscard]] std::size_t layers() const noexcept override { return inner_->layers(); }
  [[nodiscard]] int width() const noexcept override { return inner_->width(); }
  Status read_rows(std::size_t layer_index, std::span<const std::uint64_t> rows, std::span<float> out) override;
  // Passed to the wrapped reader with read-ahead on; dropped (counted) with it off.
  void prefetch(std::size_t layer_index, std::span<const std::uint64_t> rows) override;
  [[nodiscard]] EngramRowStats stats() const override;

  [[nodiscard]] bool readahead() const noexcept { return readahead_; }
  // Rows prefetch() was given that were dropped (read-ahead off); 0 with it on.
  [[nodiscard]] std::uint64_t dropped_prefetch_rows() const noexcept { return dropped_.load(); }
  [[nodiscard]] EngramRowReader& inner() noexcept { return *inner_; }

 private:
  std::unique_ptr<EngramRowReader> inner_;
  bool readahead_;
  std::atomic<std::uint64_t> rows_asked_{0};
  std::atomic<std::uint64_t> wait_ns_{0};
  std::atomic<std::uint64_t> dropped_{0};
};

}  // namespace waste::engram

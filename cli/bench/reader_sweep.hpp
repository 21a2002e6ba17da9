// `waste bench MODEL --reader-sweep`: the daemon's record readers against the disk's ceiling.
// At each queue depth D it measures, on the container's own expert records (whole records at
// random, O_DIRECT, page cache dropped before each run):
//   fio      random reads of the record size with libaio at iodepth D over the bank files: the
//            ceiling (skipped when fio is not installed)
//   pread    the daemon's ReaderPool with D threads over the pread reader (make_bank_record_reader)
//   io_uring the same pool over the io_uring reader (make_uring_record_reader)
//   uring_queue  one thread, one ring, D reads in flight (ioserver/bench/uring_queue.hpp): what a
//            real queue depth gives, for the daemon's next reader
// so D is what the daemon's --reader-threads would be. Records are drawn from one shuffled list of
// every record, continued across runs, so no record is read twice before all have been read
// (a host-side cache under a virtual disk cannot serve a later run what an earlier one read).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/result.hpp"

namespace waste::cli::bench {

struct ReaderSweepArgs {
  std::filesystem::path container;
  std::vector<int> depths{1, 2, 4, 8, 16};
  std::uint64_t bytes_per_run = 1ull << 30;  // each (reader, depth) run reads at least this much
  bool drop_caches = true;                   // before each run (root; skipped silently otherwise)
  bool fio = true;                           // measure the ceiling with fio when installed
  std::uint64_t seed = 1;
  // Rounds over every depth; each figure is the median of its rounds. The order of fio, pread and
  // io_uring rotates from round to round, so none always runs first after a drop.
  int repeat = 1;
};

struct ReadRun {
  std::uint64_t records = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;
  [[nodiscard]] double gb_per_second() const { return seconds > 0 ? double(bytes) / 1e9 / seconds : 0; }
};

struct ReaderSweepRow {
  int depth = 0;
  // The median round of each (by GB/s); the rounds' GB/s in samples.
  std::optional<ReadRun> fio;  // none when fio is missing or was not asked for
  ReadRun pread;
  ReadRun io_uring;
  ReadRun uring_queue;
  std::vector<double> fio_samples, pread_samples, io_uring_samples, uring_queue_samples;
};

struct ReaderSweepReport {
  std::string container;
  std::uint64_t record_bytes = 0;
  std::uint64_t container_records = 0;
  bool direct_io = false;         // the banks opened with O_DIRECT
  bool io_uring_engaged = false;  // false: the io_uring column fell back to pread
  std::string fio_version;        // empty: fio not run
  bool page_cache_dropped = false;
  int rounds = 1;
  double load_before[3]{}, load_after[3]{};  // /proc/loadavg around the whole sweep
  std::vector<ReaderSweepRow> rows;
  // The daemon setting the measurements recommend (pread or io_uring pool, threads): the fewest
  // threads within 3% of the best of the two pools' figures, pread on a tie.
  std::string best_reader;
  int best_depth = 0;
};

// "1,2,4": positive depths, at most 64 (the daemon's --reader-threads range). Errors name the piece.
Result<std::vector<int>> parse_depth_list(std::string_view text);

Result<ReaderSweepReport> run_reader_sweep(const ReaderSweepArgs& args);
nlohmann::json reader_sweep_json(const ReaderSweepReport& report);
void print_reader_sweep(const ReaderSweepReport& report);

}  // namespace waste::cli::bench

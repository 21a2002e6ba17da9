#include "cli/bench/reader_sweep.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "cli/bench/child_process.hpp"
#include "ioserver/nvme/reader_pool.hpp"
#include "ioserver/nvme/record_reader.hpp"
#include "ioserver/bench/uring_queue.hpp"
#include "ioserver/nvme/uring_record_reader.hpp"
#include "shared/container/container.hpp"
#include "shared/container/expert_bank.hpp"

namespace waste::cli::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Key {
  int layer = 0, expert = 0;
};

// Every record once, shuffled; next() walks it and wraps only after the last one.
class RecordOrder {
 public:
  RecordOrder(const Manifest& manifest, std::uint64_t seed) {
    for (const auto& [layer, bank] : manifest.banks) {
      for (int e = 0; e < bank.experts; ++e) keys_.push_back({layer, e});
    }
    std::mt19937_64 rng(seed);
    std::shuffle(keys_.begin(), keys_.end(), rng);
  }
  Key next() {
    const Key k = keys_[cursor_];
    cursor_ = (cursor_ + 1) % keys_.size();
    return k;
  }
  [[nodiscard]] std::size_t size() const { return keys_.size(); }

 private:
  std::vector<Key> keys_;
  std::size_t cursor_ = 0;
};

void read_loadavg(double (&out)[3]) {
  std::ifstream in("/proc/loadavg");
  in >> out[0] >> out[1] >> out[2];
}

// `records` reads through a ReaderPool of `depth` threads over `reader`, with twice as many slots
// (one queued job per thread, as in the daemon when a layer's misses are queued together): a
// thread whose read lands takes the next job at once, so `depth` reads are in flight until the
// tail, and no thread waits for this one to resubmit (on a loaded 2-core machine that wake-up
// cost milliseconds per record).
Result<ReadRun> pool_run(const RecordReader& reader, int depth, std::uint64_t records, RecordOrder& order) {
  const std::size_t record = reader.record_bytes();
  const int slots = 2 * depth;
  std::vector<AlignedBuffer> buffers;
  for (int i = 0; i < slots; ++i) buffers.emplace_back(record);
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::uint32_t> free_slots;
  Status first_error;
  for (int i = slots - 1; i >= 0; --i) free_slots.push_back(std::uint32_t(i));
  ReaderPool pool(
      reader, depth, std::size_t(slots),
      [&](std::uint32_t slot) { return buffers[slot].span().first(record); },
      [&](const ReaderPool::Job& job, const Status& status, std::chrono::nanoseconds) {
        std::lock_guard lock(mutex);
        if (!status && first_error) first_error = status;
        free_slots.push_back(job.slot);
        cv.notify_one();
      });
  const auto start = Clock::now();
  for (std::uint64_t i = 0; i < records; ++i) {
    std::uint32_t slot = 0;
    {
      std::unique_lock lock(mutex);
      cv.wait(lock, [&] { return !free_slots.empty(); });
      if (!first_error) break;
      slot = free_slots.back();
      free_slots.pop_back();
    }
    const Key k = order.next();
    if (!pool.submit(ReaderPool::Job{slot, k.layer, k.expert})) {
      return make_error(Errc::io, "reader sweep: the reader pool refused a read at depth " + std::to_string(depth));
    }
  }
  {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return free_slots.size() == std::size_t(slots); });
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!first_error) return std::unexpected(first_error.error());
  return ReadRun{records, records * record, seconds};
}

// `records` reads through one UringQueue of `depth` (one thread, `depth` slots in flight).
Result<ReadRun> queue_run(UringQueue& queue, std::uint64_t record, std::uint64_t records, RecordOrder& order) {
  std::vector<AlignedBuffer> buffers;
  for (unsigned i = 0; i < queue.depth(); ++i) buffers.emplace_back(record);
  std::vector<Key> keys;
  for (std::uint64_t i = 0; i < records; ++i) keys.push_back(order.next());
  Status first_error;
  const auto start = Clock::now();
  Status ran = queue.run(
      keys.size(), [&](std::size_t i) { return UringQueue::Key{keys[i].layer, keys[i].expert}; },
      [&](unsigned slot) { return buffers[slot].span().first(record); },
      [&](std::size_t, unsigned, const Status& status) {
        if (!status && first_error) first_error = status;
      });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!ran) return std::unexpected(ran.error());
  if (!first_error) return std::unexpected(first_error.error());
  return ReadRun{records, records * record, seconds};
}

// fio's random-read figure at `depth` (libaio, one job) over every bank file, or the reason it
// could not run. O_DIRECT as our readers have it (a tmpfs refuses it to both).
Result<ReadRun> fio_run(const ContainerInfo& info, const std::filesystem::path& dir, std::uint64_t record,
                        int depth, std::uint64_t bytes, bool direct) {
  std::string files;
  for (const auto& [layer, bank] : info.manifest.banks) {
    const std::string path = (dir / bank.file).string();
    if (path.find_first_of(":'") != std::string::npos) {
      return make_error(Errc::argument, "reader sweep: fio cannot take the bank path " + path);
    }
    files += (files.empty() ? "" : ":") + path;
  }
  // --readonly: fio lays out (unlinks and rewrites) a file it finds too small for the job; the
  // banks are the container's and must never be written. No --size: fio takes each file's own.
  const std::string cmd = "fio --readonly --allow_file_create=0 --name=ceiling --rw=randread --ioengine=libaio --direct=" + std::string(direct ? "1" : "0") +
                          " --numjobs=1 --iodepth=" +
                          std::to_string(depth) + " --bs=" + std::to_string(record) +
                          " --io_size=" + std::to_string(bytes) + " --file_service_type=random --randrepeat=0" +
                          " --output-format=json --filename='" + files + "' 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return make_error(Errc::io, "reader sweep: cannot run fio");
  std::string out;
  char chunk[4096];
  for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, pipe)) > 0;) out.append(chunk, n);
  const int rc = ::pclose(pipe);
  const auto brace = out.find('{');  // fio may print notes before the document
  if (rc != 0 || brace == std::string::npos) {
    return make_error(Errc::io, "reader sweep: fio at depth " + std::to_string(depth) + " failed: " + out.substr(0, 400));
  }
  try {
    const auto doc = nlohmann::json::parse(out.substr(brace));
    const auto& read = doc.at("jobs").at(0).at("read");
    const auto io_bytes = read.at("io_bytes").get<std::uint64_t>();
    const double ms = read.at("runtime").get<double>();
    return ReadRun{io_bytes / record, io_bytes, ms / 1000.0};
  } catch (const std::exception& e) {
    return make_error(Errc::format, std::string("reader sweep: fio's JSON: ") + e.what());
  }
}

std::string fio_version() {
  FILE* pipe = ::popen("fio --version 2>/dev/null", "r");
  if (pipe == nullptr) return {};
  char line[128] = {};
  const bool got = std::fgets(line, sizeof line, pipe) != nullptr;
  if (::pclose(pipe) != 0 || !got) return {};
  std::string v(line);
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
  return v;
}

nlohmann::json run_json(const ReadRun& r, const std::optional<ReadRun>& ceiling) {
  nlohmann::json j = {{"records", r.records}, {"bytes", r.bytes}, {"seconds", r.seconds},
                      {"gb_per_second", r.gb_per_second()}};
  if (ceiling && ceiling->gb_per_second() > 0) j["percent_of_fio"] = 100.0 * r.gb_per_second() / ceiling->gb_per_second();
  return j;
}

}  // namespace

Result<std::vector<int>> parse_depth_list(std::string_view text) {
  std::vector<int> out;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string piece(text.substr(0, comma));
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(piece, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != piece.size() || piece.empty() || v < 1 || v > 64) {
      return make_error(Errc::argument, "--depths: '" + piece + "' is not a queue depth between 1 and 64");
    }
    out.push_back(v);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
  }
  if (out.empty()) return make_error(Errc::argument, "--depths needs at least one depth");
  return out;
}

Result<ReaderSweepReport> run_reader_sweep(const ReaderSweepArgs& a) {
  auto info = ContainerInfo::open(a.container);
  if (!info) return std::unexpected(info.error());
  if (info->manifest.banks.empty()) return make_error(Errc::argument, a.container.string() + ": the container has no expert banks");
  auto open_banks = [&]() { return ExpertBanks::open(a.container, info->manifest, info->n_codebooks, BankReadOptions{true, false}); };
  auto pread_banks = open_banks();
  if (!pread_banks) return std::unexpected(pread_banks.error());
  auto uring_banks = open_banks();
  if (!uring_banks) return std::unexpected(uring_banks.error());
  auto queue_banks = open_banks();
  if (!queue_banks) return std::unexpected(queue_banks.error());
  const auto pread_reader = make_bank_record_reader(std::move(*pread_banks), info->manifest);
  const auto uring_reader = make_uring_record_reader(std::move(*uring_banks), info->manifest);

  ReaderSweepReport r;
  r.container = a.container.string();
  r.record_bytes = pread_reader->record_bytes();
  r.direct_io = pread_reader->direct_io_engaged();
  r.io_uring_engaged = uring_reader->io_uring_engaged();
  if (a.fio) r.fio_version = fio_version();
  RecordOrder order(info->manifest, a.seed);
  r.container_records = order.size();
  r.rounds = std::max(a.repeat, 1);
  read_loadavg(r.load_before);
  r.page_cache_dropped = true;
  auto drop = [&] {
    if (a.drop_caches && !drop_page_cache()) r.page_cache_dropped = false;
    // drop_page_cache syncs first: let the writeback it started (other processes' dirty pages)
    // reach the disk before the timed reads, whichever reader comes next.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  };
  if (!a.drop_caches) r.page_cache_dropped = false;

  const bool with_fio = !r.fio_version.empty();
  std::vector<std::vector<ReadRun>> fio_runs(a.depths.size()), pread_runs(a.depths.size()), uring_runs(a.depths.size()),
      queue_runs(a.depths.size());
  for (int round = 0; round < std::max(a.repeat, 1); ++round) {
    for (std::size_t d = 0; d < a.depths.size(); ++d) {
      const int depth = a.depths[d];
      // At least two reads per thread, so every thread is busy at least once.
      const std::uint64_t records =
          std::max<std::uint64_t>((a.bytes_per_run + r.record_bytes - 1) / r.record_bytes, 2 * std::uint64_t(depth));
      for (int k = 0; k < 4; ++k) {
        const int which = (k + round) % 4;  // 0 fio, 1 pread, 2 io_uring, 3 uring_queue
        if (which == 0 && !with_fio) continue;
        drop();
        if (which == 3) {
          auto queue = UringQueue::create(*queue_banks, unsigned(depth));
          if (!queue) return std::unexpected(queue.error().with_context("uring_queue at depth " + std::to_string(depth)));
          auto run = queue_run(*queue, r.record_bytes, records, order);
          if (!run) return std::unexpected(run.error().with_context("uring_queue at depth " + std::to_string(depth)));
          queue_runs[d].push_back(*run);
        } else if (which == 0) {
          auto f = fio_run(*info, a.container, r.record_bytes, depth, records * r.record_bytes, r.direct_io);
          if (!f) return std::unexpected(f.error());
          fio_runs[d].push_back(*f);
        } else {
          const RecordReader& reader = which == 1 ? *pread_reader : *uring_reader;
          auto run = pool_run(reader, depth, records, order);
          if (!run) {
            return std::unexpected(run.error().with_context(std::string(which == 1 ? "pread" : "io_uring") +
                                                            " at depth " + std::to_string(depth)));
          }
          (which == 1 ? pread_runs : uring_runs)[d].push_back(*run);
        }
      }
      std::fprintf(stderr, "round %d depth %d: fio %.3f, pread %.3f, io_uring %.3f, uring_queue %.3f GB/s\n", round + 1,
                   depth, with_fio ? fio_runs[d].back().gb_per_second() : 0.0, pread_runs[d].back().gb_per_second(),
                   uring_runs[d].back().gb_per_second(), queue_runs[d].back().gb_per_second());
    }
  }
  read_loadavg(r.load_after);
  auto median = [](std::vector<ReadRun> runs, std::vector<double>& samples) {
    for (const auto& run : runs) samples.push_back(run.gb_per_second());
    std::sort(runs.begin(), runs.end(), [](const ReadRun& x, const ReadRun& y) { return x.gb_per_second() < y.gb_per_second(); });
    return runs[runs.size() / 2];
  };
  for (std::size_t d = 0; d < a.depths.size(); ++d) {
    ReaderSweepRow row;
    row.depth = a.depths[d];
    if (with_fio) row.fio = median(fio_runs[d], row.fio_samples);
    row.pread = median(pread_runs[d], row.pread_samples);
    row.io_uring = median(uring_runs[d], row.io_uring_samples);
    row.uring_queue = median(queue_runs[d], row.uring_queue_samples);
    r.rows.push_back(std::move(row));
  }

  double best = 0;
  for (const auto& row : r.rows) best = std::max({best, row.pread.gb_per_second(), row.io_uring.gb_per_second()});
  for (const auto& row : r.rows) {  // depths in the order given; keep the smallest that qualifies
    for (const auto& [name, run] : {std::pair{"pread", &row.pread}, std::pair{"io_uring", &row.io_uring}}) {
      if (run->gb_per_second() >= 0.97 * best && (r.best_depth == 0 || row.depth < r.best_depth)) {
        r.best_reader = name;
        r.best_depth = row.depth;
      }
    }
  }
  return r;
}

nlohmann::json reader_sweep_json(const ReaderSweepReport& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows) {
    nlohmann::json j = {{"depth", row.depth}, {"pread", run_json(row.pread, row.fio)},
                        {"io_uring", run_json(row.io_uring, row.fio)},
                        {"uring_queue", run_json(row.uring_queue, row.fio)},
                        {"samples_gb_per_second",
                         {{"fio", row.fio_samples},
                          {"pread", row.pread_samples},
                          {"io_uring", row.io_uring_samples},
                          {"uring_queue", row.uring_queue_samples}}}};
    j["fio"] = row.fio ? run_json(*row.fio, std::nullopt) : nlohmann::json();
    rows.push_back(std::move(j));
  }
  return {{"container", r.container},
          {"record_bytes", r.record_bytes},
          {"container_records", r.container_records},
          {"direct_io", r.direct_io},
          {"io_uring_engaged", r.io_uring_engaged},
          {"fio", r.fio_version.empty() ? nlohmann::json() : nlohmann::json(r.fio_version)},
          {"page_cache_dropped", r.page_cache_dropped},
          {"rounds", r.rounds},
          {"load_average", {{"before", r.load_before}, {"after", r.load_after}}},
          {"rows", rows},
          {"best", {{"reader", r.best_reader}, {"depth", r.best_depth}}}};
}

void print_reader_sweep(const ReaderSweepReport& r) {
  std::printf("reader sweep of %s: records of %llu bytes, direct I/O %s, io_uring %s, fio %s\n", r.container.c_str(),
              static_cast<unsigned long long>(r.record_bytes), r.direct_io ? "on" : "off",
              r.io_uring_engaged ? "engaged" : "fell back to pread", r.fio_version.empty() ? "not run" : r.fio_version.c_str());
  std::printf("load average %.2f %.2f %.2f before, %.2f %.2f %.2f after; page cache %s\n", r.load_before[0],
              r.load_before[1], r.load_before[2], r.load_after[0], r.load_after[1], r.load_after[2],
              r.page_cache_dropped ? "dropped before each run" : "not dropped");
  std::printf("%5s %8s %10s %10s %8s %10s %8s %10s %8s\n", "depth", "records", "fio GB/s", "pread GB/s", "% fio",
              "uring GB/s", "% fio", "queue GB/s", "% fio");
  for (const auto& row : r.rows) {
    const double ceiling = row.fio ? row.fio->gb_per_second() : 0;
    auto pct = [&](const ReadRun& run) { return ceiling > 0 ? 100.0 * run.gb_per_second() / ceiling : 0.0; };
    std::printf("%5d %8llu %10.3f %10.3f %8.1f %10.3f %8.1f %10.3f %8.1f\n", row.depth,
                static_cast<unsigned long long>(row.pread.records), ceiling, row.pread.gb_per_second(), pct(row.pread),
                row.io_uring.gb_per_second(), pct(row.io_uring), row.uring_queue.gb_per_second(), pct(row.uring_queue));
  }
  std::printf("best: %s with %d reader threads (medians of %d rounds)\n", r.best_reader.c_str(), r.best_depth, r.rounds);
}

}  // namespace waste::cli::bench

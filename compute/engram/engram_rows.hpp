// DeepSeek-V4.1's Engram rows at run time: a token's rows read from the container's
// engram-L{n}.bin tables (shared/container/engram_table.hpp) and decoded to f32, for the
// layer loop (and later the I/O daemon).
//
//   EngramRowSource  every table the layout names, opened and checked (header, CRC of the
//                    header, sizes against engram.json, file size); rows read one 4 KiB page
//                    at a time (no row crosses a page), O_DIRECT with an aligned buffer when the
//                    filesystem allows, else buffered (note() says which); a bounded LRU cache
//                    of decoded rows; reader threads for prefetch() and for read_rows' misses.
//   EngramStage      a run of tokens of one sequence -> its row ids for every Engram layer (one
//                    sequence_row_ids call, the history advanced once, all rows prefetched),
//                    then rows(decoder_layer) -> [T][columns * head_dim] floats for that layer.
//
// Errors name the file and the row: "engram-L14.bin: row 123 beyond its 100 rows".
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compute/engram/engram_layout.hpp"
#include "compute/engram/ngram_hash.hpp"
#include "shared/container/engram_table.hpp"
#include "shared/result.hpp"

namespace waste::engram {

struct EngramRowStats {
  std::uint64_t hits = 0;         // rows read_rows found in the cache
  std::uint64_t misses = 0;       // rows read_rows did not (read by a reader thread or by the caller)
  std::uint64_t prefetched = 0;   // rows the reader threads read into the cache (prefetch, or a miss handed over)
  std::uint64_t bytes_read = 0;   // bytes read from the tables (whole pages, every reader)
  // Filled by MeteredEngramRows (engram_read_meter.hpp, the engine's wrapper); 0 from a bare reader.
  std::uint64_t rows_asked = 0;   // rows read_rows was asked for (the layer loop's demand)
  double wait_seconds = 0;        // time spent inside read_rows (the layer loop waiting for rows)
};

// What the layer loop reads Engram rows through: the in-process EngramRowSource, or
// DaemonEngramRows (compute/io/daemon_engram_rows.hpp), which gets the pages from waste-ioserver's
// shared Engram pool. Layer index i is the i-th table of the EngramLayout both were opened for.
class EngramRowReader {
 public:
  virtual ~EngramRowReader() = default;
  [[nodiscard]] virtual std::size_t layers() const noexcept = 0;
  [[nodiscard]] virtual int width() const noexcept = 0;  // floats per row (head_dim)
  // out [rows.size()][width] = the decoded rows of table `layer_index` (bit for bit the same
  // whichever reader). Errors name the table and the row.
  virtual Status read_rows(std::size_t layer_index, std::span<const std::uint64_t> rows, std::span<float> out) = 0;
  // Asks for these rows ahead of read_rows; returns at once. Rows beyond the table are skipped.
  virtual void prefetch(std::size_t layer_index, std::span<const std::uint64_t> rows) = 0;
  [[nodiscard]] virtual EngramRowStats stats() const = 0;
};

struct EngramRowSourceOptions {
  std::size_t cache_bytes = std::size_t(64) << 20;  // decoded rows kept (width * 4 bytes each); 0 = none
  bool direct = true;        // O_DIRECT when the filesystem allows (else buffered, with a note)
  // Reader threads: prefetch() queues rows for them, and read_rows hands them its misses so a
  // token's 24 pages are read in parallel (queue depth for O_DIRECT). 0: read_rows reads its
  // misses itself and prefetch() only posix_fadvise(WILLNEED)s the pages (useful when buffered);
  // so too with cache_bytes 0 (the readers hand rows over through the cache).
  int reader_threads = 4;
};

class EngramRowSource final : public EngramRowReader {
 public:
  // Opens engram-L{n}.bin in `container_dir` for every layer of `layout` (in its order: layer
  // index i is layout.layers[i]). Each header must parse, name layer n, have width
  // layout.head_dim and layout.layers[i].rows() rows, and the file its header's size.
  static Result<EngramRowSource> open(const std::filesystem::path& container_dir, const EngramLayout& layout,
                                      const EngramRowSourceOptions& options = {});

  EngramRowSource(EngramRowSource&&) noexcept;
  EngramRowSource& operator=(EngramRowSource&&) noexcept;
  ~EngramRowSource() override;

  [[nodiscard]] std::size_t layers() const noexcept override;
  [[nodiscard]] int width() const noexcept override;  // floats per row (head_dim)
  [[nodiscard]] const EngramTableHeader& header(std::size_t layer_index) const;
  [[nodiscard]] bool direct() const noexcept;            // every table read with O_DIRECT
  [[nodiscard]] const std::string& note() const noexcept;  // why a table is read buffered; empty if none

  // out [rows.size()][width] = the decoded rows of table `layer_index`. Cached rows are copied;
  // the others are read a page at a time (rows of one page share a read) and cached: by the
  // reader threads when there are any (a row already queued by prefetch() is waited for, not
  // read twice), else by the caller. Rows are copied out of the cache, so a run's rows should
  // fit in it (cache_bytes); a row evicted before it was copied is read again by the caller.
  // Safe to call from several threads.
  // Errors: a row beyond the table ("engram-L14.bin: row 123 beyond its 100 rows"), a short
  // read, an I/O error; out must hold rows.size() * width floats.
  Status read_rows(std::size_t layer_index, std::span<const std::uint64_t> rows, std::span<float> out) override;

  // Queues these rows for the reader threads (into the cache), or posix_fadvise(WILLNEED)s their
  // pages without them; returns at once. Rows cached or queued already, and rows beyond the
  // table (read_rows reports them), are skipped.
  void prefetch(std::size_t layer_index, std::span<const std::uint64_t> rows) override;
  // Until every prefetch scheduled so far is done (tests, and a caller that wants the reads
  // finished before timing).
  void wait_prefetch();

  // Recomputes the CRC-32 of a table's data pages (reads the whole file) against its header:
  // "engram-L14.bin: data CRC 0x12345678, its header says 0x9abcdef0 (damaged rows)".
  Status check_data_crc(std::size_t layer_index) const;

  [[nodiscard]] EngramRowStats stats() const override;

 private:
  struct State;
  explicit EngramRowSource(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

// One sequence's Engram rows for the layer loop. Not thread-safe; one per sequence in flight
// (or reused: begin() per run).
class EngramStage {
 public:
  // Both must outlive the stage. `source`: the in-process EngramRowSource or the daemon's rows.
  EngramStage(const EngramTables& tables, EngramRowReader& source);

  // A run of tokens of one sequence continuing `history`: row ids of every Engram layer
  // (sequence_row_ids; `dead` empty or one flag per token, image-span tokens), and every row
  // prefetched. On success the history is advanced past the run; on an error it is unchanged.
  Status begin(std::span<const std::int32_t> tokens, std::span<const std::uint8_t> dead, NgramHistory& history);

  // The layout index of a decoder layer, or -1 when it has no Engram table.
  [[nodiscard]] int layer_index(int decoder_layer) const noexcept;
  [[nodiscard]] std::size_t tokens() const noexcept { return tokens_; }
  // Floats per token of one layer: columns (24 in the release) * head_dim.
  [[nodiscard]] std::size_t row_floats() const noexcept;
  // Row ids of the last begin(): [T][layers][columns].
  [[nodiscard]] std::span<const std::uint64_t> row_ids() const noexcept { return ids_; }

  // out [tokens()][row_floats()] = the decoded rows of the run for `decoder_layer`, token t's
  // columns in sequence_row_ids' order ((n - 2) * n_heads + head). Errors: a layer without an
  // Engram table, out of the wrong size, the source's read errors.
  Status rows(int decoder_layer, std::span<float> out);

  // Bytes of the row-id buffers held (vector capacities), for the memory plan's check.
  [[nodiscard]] std::uint64_t allocated_bytes() const noexcept {
    return (ids_.capacity() + layer_ids_.capacity()) * sizeof(std::uint64_t);
  }

 private:
  const EngramTables* tables_;
  EngramRowReader* source_;
  std::size_t tokens_ = 0;
  std::vector<std::uint64_t> ids_;
  std::vector<std::uint64_t> layer_ids_;  // scratch: one layer's ids, [T][columns]
};

}  // namespace waste::engram

// Engram rows from the container's tables (engram_rows.hpp).
#include "compute/engram/engram_rows.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "shared/container/file_io.hpp"
#include "shared/crc32.hpp"

namespace waste::engram {
namespace {

// A page-aligned buffer for O_DIRECT reads.
class PageBuffer {
 public:
  explicit PageBuffer(std::size_t bytes) : size_(bytes) {
    void* p = std::aligned_alloc(kEngramPage, bytes);
    if (p == nullptr) throw std::bad_alloc();
    data_.reset(static_cast<std::byte*>(p));
  }
  std::byte* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  std::size_t size_;
};

struct Table {
  std::string name;  // engram-L{n}.bin, the errors' origin
  EngramTableHeader header;
  UniqueFd buffered;  // always open: the header, fadvise, the CRC check, and reads when not direct
  UniqueFd direct;    // open when O_DIRECT works on this filesystem
  int read_fd() const noexcept { return direct.valid() ? direct.get() : buffered.get(); }
};

std::string hex32(std::uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

// O_DIRECT needs an aligned buffer, offset and length; some filesystems (tmpfs) refuse it at
// open or at the first read, so one aligned read of the header page decides.
UniqueFd try_open_direct(const std::filesystem::path& path) {
#ifdef O_DIRECT
  auto fd = open_file(path, O_RDONLY | O_DIRECT);
  if (!fd) return {};
  PageBuffer probe(kEngramPage);
  if (::pread(fd->get(), probe.data(), kEngramPage, 0) != ssize_t(kEngramPage)) return {};
  return std::move(*fd);
#else
  (void)path;
  return {};
#endif
}

}  // namespace

struct EngramRowSource::State {
  std::vector<Table> tables;
  int width = 0;
  std::string note;

  // The cache: decoded rows by key (layer index, row), most recent first.
  struct Entry {
    std::uint64_t key;
    std::vector<float> values;
  };
  mutable std::mutex mu;
  std::list<Entry> lru;
  std::unordered_map<std::uint64_t, std::list<Entry>::iterator> index;
  std::size_t capacity = 0;  // rows
  EngramRowStats stats;

  // The reader threads: chunks of rows of one table, sorted, so rows of a page share a read.
  // `pending` holds every queued or in-flight row's key until it is in the cache (or failed).
  struct Chunk {
    std::size_t layer;
    std::vector<std::uint64_t> rows;
  };
  static constexpr std::size_t kChunkRows = 4;  // a token's 24 rows: 6 chunks over the readers
  std::condition_variable work_cv, done_cv;
  std::deque<Chunk> queue;
  std::unordered_set<std::uint64_t> pending;
  int in_flight = 0;  // chunks being read
  bool stop = false;
  std::vector<std::thread> readers;

  static std::uint64_t key(std::size_t layer, std::uint64_t row) noexcept {
    return (std::uint64_t(layer) << 42) | row;  // rows are below 2^40 (check_engram_header)
  }

  // Under mu: copies a cached row into out and marks it recent.
  bool lookup(std::uint64_t k, float* out) {
    auto it = index.find(k);
    if (it == index.end()) return false;
    lru.splice(lru.begin(), lru, it->second);
    std::memcpy(out, it->second->values.data(), std::size_t(width) * sizeof(float));
    return true;
  }
  // Under mu: inserts (or refreshes) a row, evicting the least recent past capacity.
  void insert(std::uint64_t k, const float* values) {
    if (capacity == 0) return;
    if (auto it = index.find(k); it != index.end()) {
      lru.splice(lru.begin(), lru, it->second);
      return;
    }
    if (index.size() >= capacity) {
      Entry& last = lru.back();
      index.erase(last.key);
      last.key = k;
      std::memcpy(last.values.data(), values, std::size_t(width) * sizeof(float));
      lru.splice(lru.begin(), lru, std::prev(lru.end()));
    } else {
      lru.push_front(Entry{k, std::vector<float>(values, values + width)});
    }
    index[k] = lru.begin();
  }

  // Under mu: queues the rows of one table that are neither cached nor pending, in chunks, at
  // the back (prefetch) or the front (a caller waiting). Returns whether anything was queued.
  bool enqueue(std::size_t layer, std::vector<std::uint64_t> rows, bool front) {
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    std::vector<Chunk> chunks;
    for (std::uint64_t r : rows) {
      const std::uint64_t k = key(layer, r);
      if (index.count(k) != 0 || !pending.insert(k).second) continue;
      if (chunks.empty() || chunks.back().rows.size() == kChunkRows) chunks.push_back(Chunk{layer, {}});
      chunks.back().rows.push_back(r);
    }
    if (front) {
      queue.insert(queue.begin(), std::make_move_iterator(chunks.begin()), std::make_move_iterator(chunks.end()));
    } else {
      queue.insert(queue.end(), std::make_move_iterator(chunks.begin()), std::make_move_iterator(chunks.end()));
    }
    return !chunks.empty();
  }

  Status row_in_range(std::size_t layer, std::uint64_t row) const {
    const Table& t = tables[layer];
    if (row >= t.header.rows) {
      return make_error(Errc::argument,
                        t.name + ": row " + std::to_string(row) + " beyond its " + std::to_string(t.header.rows) + " rows");
    }
    return ok();
  }

  // Reads the page holding `row` into buf (page_bytes bytes).
  Status read_page(std::size_t layer, std::uint64_t row, PageBuffer& buf) {
    const Table& t = tables[layer];
    const EngramTableHeader& h = t.header;
    const std::uint64_t page = row / h.rows_per_page();
    const std::uint64_t off = kEngramPage + page * h.page_bytes();
    auto n = pread_full(t.read_fd(), std::span(buf.data(), h.page_bytes()), off);
    if (!n) return std::unexpected(n.error().with_context(t.name + ": row " + std::to_string(row)));
    if (*n != h.page_bytes()) {
      return make_error(Errc::io, t.name + ": row " + std::to_string(row) + ": read " + std::to_string(*n) + " of " +
                                      std::to_string(h.page_bytes()) + " bytes at offset " + std::to_string(off) +
                                      " (the file was cut short)");
    }
    std::lock_guard lock(mu);
    stats.bytes_read += *n;
    return ok();
  }

  // Reads one chunk's rows (sorted: rows of one page share a read) into the cache.
  void read_chunk(const Chunk& c, PageBuffer& buf, std::vector<float>& values) {
    const EngramTableHeader& h = tables[c.layer].header;
    std::uint64_t last_page = ~std::uint64_t(0);
    for (std::uint64_t row : c.rows) {
      const std::uint64_t page = row / h.rows_per_page();
      bool have = page == last_page;
      if (!have) {
        have = bool(read_page(c.layer, row, buf));  // a failure: the caller's own read reports it
        last_page = have ? page : ~std::uint64_t(0);
      }
      if (have) {
        const std::size_t at = std::size_t(row % h.rows_per_page() * h.row_bytes());
        dequantize_engram_row(h.bits, std::span(buf.data() + at, h.row_bytes()), values);
      }
      std::lock_guard lock(mu);
      if (have) {
        insert(key(c.layer, row), values.data());
        ++stats.prefetched;
      }
      pending.erase(key(c.layer, row));
    }
  }

  void run_reader() {
    PageBuffer buf(max_page_bytes());
    std::vector<float> values(static_cast<std::size_t>(width));
    std::unique_lock lock(mu);
    for (;;) {
      work_cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (stop) return;
      Chunk c = std::move(queue.front());
      queue.pop_front();
      ++in_flight;
      lock.unlock();
      read_chunk(c, buf, values);
      lock.lock();
      --in_flight;
      done_cv.notify_all();
    }
  }

  std::size_t max_page_bytes() const {
    std::size_t m = kEngramPage;
    for (const auto& t : tables) m = std::max<std::size_t>(m, t.header.page_bytes());
    return m;
  }

  ~State() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    work_cv.notify_all();
    for (auto& r : readers) r.join();
  }
};

EngramRowSource::EngramRowSource(std::unique_ptr<State> state) : s_(std::move(state)) {}
EngramRowSource::EngramRowSource(EngramRowSource&&) noexcept = default;
EngramRowSource& EngramRowSource::operator=(EngramRowSource&&) noexcept = default;
EngramRowSource::~EngramRowSource() = default;

Result<EngramRowSource> EngramRowSource::open(const std::filesystem::path& container_dir, const EngramLayout& layout,
                                              const EngramRowSourceOptions& options) {
  auto s = std::make_unique<State>();
  s->width = layout.head_dim;
  for (const EngramLayer& layer : layout.layers) {
    Table t;
    t.name = engram_table_file_name(layer.layer);
    const std::filesystem::path path = container_dir / t.name;
    auto fd = open_file(path, O_RDONLY);
    if (!fd) return std::unexpected(fd.error());
    t.buffered = std::move(*fd);
    std::array<std::byte, kEngramPage> head{};
    auto n = pread_full(t.buffered.get(), head, 0);
    if (!n) return std::unexpected(n.error().with_context(t.name));
    auto h = parse_engram_header(std::span(head.data(), *n), t.name);
    if (!h) return std::unexpected(h.error());
    t.header = *h;
    if (h->layer != layer.layer) {
      return make_error(Errc::format, t.name + ": its header says layer " + std::to_string(h->layer));
    }
    if (h->width != layout.head_dim) {
      return make_error(Errc::format, t.name + ": rows of " + std::to_string(h->width) +
                                          " columns, engram.json's head_dim is " + std::to_string(layout.head_dim));
    }
    if (h->rows != layer.rows()) {
      return make_error(Errc::format, t.name + ": " + std::to_string(h->rows) + " rows, engram.json's primes of layer " +
                                          std::to_string(layer.layer) + " sum to " + std::to_string(layer.rows()));
    }
    auto size = file_size(t.buffered.get(), path);
    if (!size) return std::unexpected(size.error());
    if (*size != h->file_bytes()) {
      return make_error(Errc::format, t.name + ": " + std::to_string(*size) + " bytes, its header needs " +
                                          std::to_string(h->file_bytes()) +
                                          (*size < h->file_bytes() ? " (truncated)" : " (trailing bytes)"));
    }
    if (options.direct) t.direct = try_open_direct(path);
    if (options.direct && !t.direct.valid()) {
      s->note += (s->note.empty() ? "" : "; ") + t.name + ": O_DIRECT refused by this filesystem, read buffered";
    }
    s->tables.push_back(std::move(t));
  }
  if (!options.direct) s->note = "O_DIRECT off: the tables are read buffered";
  const std::size_t row_floats_bytes = std::size_t(std::max(layout.head_dim, 1)) * sizeof(float);
  s->capacity = options.cache_bytes / row_floats_bytes;
  if (!s->tables.empty() && s->capacity > 0) {  // the readers hand rows over through the cache
    State* raw = s.get();
    for (int i = 0; i < options.reader_threads; ++i) s->readers.emplace_back([raw] { raw->run_reader(); });
  }
  return EngramRowSource(std::move(s));
}

std::size_t EngramRowSource::layers() const noexcept { return s_->tables.size(); }
int EngramRowSource::width() const noexcept { return s_->width; }
const EngramTableHeader& EngramRowSource::header(std::size_t layer_index) const {
  return s_->tables.at(layer_index).header;
}
bool EngramRowSource::direct() const noexcept {
  for (const auto& t : s_->tables) {
    if (!t.direct.valid()) return false;
  }
  return true;
}
const std::string& EngramRowSource::note() const noexcept { return s_->note; }

Status EngramRowSource::read_rows(std::size_t layer_index, std::span<const std::uint64_t> rows, std::span<float> out) {
  State& s = *s_;
  if (layer_index >= s.tables.size()) {
    return make_error(Errc::argument, "engram rows: layer index " + std::to_string(layer_index) + " of " +
                                          std::to_string(s.tables.size()) + " tables");
  }
  const std::size_t w = std::size_t(s.width);
  if (out.size() != rows.size() * w) {
    return make_error(Errc::argument, "engram rows: " + std::to_string(out.size()) + " floats for " +
                                          std::to_string(rows.size()) + " rows of " + std::to_string(w));
  }
  for (std::uint64_t row : rows) WASTE_TRY(s.row_in_range(layer_index, row));
  std::vector<std::size_t> missed;  // positions in `rows`
  {
    std::lock_guard lock(s.mu);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (s.lookup(State::key(layer_index, rows[i]), out.data() + i * w)) {
        ++s.stats.hits;
      } else {
        ++s.stats.misses;
        missed.push_back(i);
      }
    }
    if (missed.empty()) return ok();
    if (!s.readers.empty()) {
      std::vector<std::uint64_t> ids;
      ids.reserve(missed.size());
      for (std::size_t i : missed) ids.push_back(rows[i]);
      if (s.enqueue(layer_index, std::move(ids), true)) s.work_cv.notify_all();
    }
  }
  // With reader threads: wait for each missed row (queued now or by an earlier prefetch) and copy
  // it from the cache; what is not there (no cache room, evicted, a failed read) the caller
  // reads itself, as without readers.
  std::vector<std::size_t> still;
  if (!s.readers.empty()) {
    std::unique_lock lock(s.mu);
    for (std::size_t i : missed) {
      const std::uint64_t k = State::key(layer_index, rows[i]);
      s.done_cv.wait(lock, [&] { return s.pending.count(k) == 0; });
      if (!s.lookup(k, out.data() + i * w)) still.push_back(i);
    }
  } else {
    still = std::move(missed);
  }
  if (still.empty()) return ok();
  std::sort(still.begin(), still.end(), [&](std::size_t a, std::size_t b) { return rows[a] < rows[b]; });
  const EngramTableHeader& h = s.tables[layer_index].header;
  PageBuffer buf(h.page_bytes());
  std::uint64_t last_page = ~std::uint64_t(0);
  for (std::size_t i : still) {
    const std::uint64_t row = rows[i];
    const std::uint64_t page = row / h.rows_per_page();
    if (page != last_page) {
      WASTE_TRY(s.read_page(layer_index, row, buf));
      last_page = page;
    }
    const std::size_t at = std::size_t(row % h.rows_per_page() * h.row_bytes());
    float* dst = out.data() + i * w;
    dequantize_engram_row(h.bits, std::span(buf.data() + at, h.row_bytes()), std::span(dst, w));
    std::lock_guard lock(s.mu);
    s.insert(State::key(layer_index, row), dst);
  }
  return ok();
}

void EngramRowSource::prefetch(std::size_t layer_index, std::span<const std::uint64_t> rows) {
  State& s = *s_;
  if (layer_index >= s.tables.size() || rows.empty()) return;
  const Table& t = s.tables[layer_index];
  std::vector<std::uint64_t> keep;
  keep.reserve(rows.size());
  for (std::uint64_t r : rows) {
    if (r < t.header.rows) keep.push_back(r);
  }
  if (s.readers.empty()) {
#ifdef POSIX_FADV_WILLNEED
    for (std::uint64_t r : keep) {
      const std::uint64_t off = kEngramPage + r / t.header.rows_per_page() * t.header.page_bytes();
      ::posix_fadvise(t.buffered.get(), off_t(off), off_t(t.header.page_bytes()), POSIX_FADV_WILLNEED);
    }
#endif
    return;
  }
  bool queued = false;
  {
    std::lock_guard lock(s.mu);
    queued = s.enqueue(layer_index, std::move(keep), false);
  }
  if (queued) s.work_cv.notify_all();
}

void EngramRowSource::wait_prefetch() {
  State& s = *s_;
  std::unique_lock lock(s.mu);
  s.done_cv.wait(lock, [&] { return s.queue.empty() && s.in_flight == 0; });
}

Status EngramRowSource::check_data_crc(std::size_t layer_index) const {
  const Table& t = s_->tables.at(layer_index);
  const EngramTableHeader& h = t.header;
  std::uint32_t crc = 0;
  std::vector<std::byte> buf(std::size_t(1) << 20);
  for (std::uint64_t off = 0; off < h.data_bytes();) {
    const std::size_t want = std::size_t(std::min<std::uint64_t>(buf.size(), h.data_bytes() - off));
    auto n = pread_full(t.buffered.get(), std::span(buf.data(), want), kEngramPage + off);
    if (!n) return std::unexpected(n.error().with_context(t.name));
    if (*n != want) return make_error(Errc::io, t.name + ": the data ends early, at byte " + std::to_string(off + *n));
    crc = crc32_update(crc, std::span(buf.data(), want));
    off += want;
  }
  if (crc != h.data_crc) {
    return make_error(Errc::format, t.name + ": data CRC " + hex32(crc) + ", its header says " + hex32(h.data_crc) +
                                        " (damaged rows)");
  }
  return ok();
}

EngramRowStats EngramRowSource::stats() const {
  std::lock_guard lock(s_->mu);
  return s_->stats;
}

// ---- the stage

EngramStage::EngramStage(const EngramTables& tables, EngramRowReader& source) : tables_(&tables), source_(&source) {}

int EngramStage::layer_index(int decoder_layer) const noexcept {
  const auto& layers = tables_->layout.layers;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].layer == decoder_layer) return int(i);
  }
  return -1;
}

std::size_t EngramStage::row_floats() const noexcept {
  return std::size_t(tables_->layout.columns()) * std::size_t(tables_->layout.head_dim);
}

Status EngramStage::begin(std::span<const std::int32_t> tokens, std::span<const std::uint8_t> dead,
                          NgramHistory& history) {
  if (source_->layers() != tables_->layout.layers.size() || source_->width() != tables_->layout.head_dim) {
    return make_error(Errc::argument, "engram stage: the row source holds " + std::to_string(source_->layers()) +
                                          " tables of width " + std::to_string(source_->width()) + ", the layout " +
                                          std::to_string(tables_->layout.layers.size()) + " of " +
                                          std::to_string(tables_->layout.head_dim));
  }
  NgramHistory next = history;  // advanced only when the whole run is addressed
  auto ids = sequence_row_ids(*tables_, tokens, dead, next);
  if (!ids) return std::unexpected(ids.error());
  ids_ = std::move(*ids);
  tokens_ = tokens.size();
  history = std::move(next);
  const std::size_t n_layers = tables_->layout.layers.size(), columns = std::size_t(tables_->layout.columns());
  for (std::size_t l = 0; l < n_layers; ++l) {
    layer_ids_.resize(tokens_ * columns);
    for (std::size_t t = 0; t < tokens_; ++t) {
      std::memcpy(layer_ids_.data() + t * columns, ids_.data() + (t * n_layers + l) * columns,
                  columns * sizeof(std::uint64_t));
    }
    source_->prefetch(l, layer_ids_);
  }
  return ok();
}

Status EngramStage::rows(int decoder_layer, std::span<float> out) {
  const int l = layer_index(decoder_layer);
  if (l < 0) {
    return make_error(Errc::argument, "engram stage: layer " + std::to_string(decoder_layer) + " has no Engram table");
  }
  if (out.size() != tokens_ * row_floats()) {
    return make_error(Errc::argument, "engram stage: " + std::to_string(out.size()) + " floats for " +
                                          std::to_string(tokens_) + " tokens of " + std::to_string(row_floats()));
  }
  const std::size_t n_layers = tables_->layout.layers.size(), columns = std::size_t(tables_->layout.columns());
  layer_ids_.resize(tokens_ * columns);
  for (std::size_t t = 0; t < tokens_; ++t) {
    std::memcpy(layer_ids_.data() + t * columns, ids_.data() + (t * n_layers + std::size_t(l)) * columns,
                columns * sizeof(std::uint64_t));
  }
  auto st = source_->read_rows(std::size_t(l), layer_ids_, out);
  if (!st) return std::unexpected(st.error().with_context("engram layer " + std::to_string(decoder_layer)));
  return ok();
}

}  // namespace waste::engram

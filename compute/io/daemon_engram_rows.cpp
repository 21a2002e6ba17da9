#include "compute/io/daemon_engram_rows.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "shared/container/engram_table.hpp"
#include "shared/ipc/process_liveness.hpp"
#include "shared/ipc/segment_names.hpp"
#include "shared/ipc/shm_layout.hpp"
#include "shared/ipc/shm_segment.hpp"
#include "shared/ipc/spsc_ring.hpp"

namespace waste {

using namespace std::chrono_literals;

namespace {

constexpr int kSpin = 4000;           // polls before sleeping on the completion futex
constexpr auto kWaitSlice = 50ms;     // futex timeout between liveness checks
constexpr std::size_t kMaxBatch = 512;  // pages demanded before their release (< kRingCapacity)
constexpr int kFullRetries = 2000;    // rounds a page refused for a full pool is asked for again (1 ms apart)

// What this client keeps of one table: copied from the read-only arena at open.
struct TableGeometry {
  std::uint32_t index = 0;  // the daemon's table index
  std::string name;         // engram-L{n}.bin
  int bits = 8;
  std::uint64_t rows = 0, pages = 0;
  std::uint32_t row_bytes = 0, rows_per_page = 0;
};

}  // namespace

struct DaemonEngramRows::Impl {
  ipc::ClientLease lease;
  ipc::ShmSegment arena_seg, ring_seg, wake_seg;
  std::shared_ptr<const void> private_keep_alive;
  ipc::ArenaView view;  // read-only mapping
  ipc::WakeShm* wake = nullptr;
  int client_idx = 0, daemon_pid = 0;
  std::uint32_t pool_pages = 0;
  std::optional<ipc::ProcessWatch> daemon_watch;
  std::optional<ipc::RingProducer> requests;
  std::optional<ipc::RingConsumer> completions;
  std::vector<TableGeometry> tables;  // in the layout's order
  int width = 0;

  std::mutex mu;  // one caller at a time on the rings
  std::optional<Error> broken;
  engram::EngramRowStats stats;

  // One batch's demands, by tag.
  enum class PageState : std::uint8_t { pending, ready, full, failed };
  struct Demand {
    std::uint64_t page;
    PageState state;
    std::uint32_t slot;
    bool miss;
    std::string error;
  };
  std::vector<Demand> batch;

  Status check_daemon() {
    if (broken) return std::unexpected(*broken);
    auto fail = [&](std::string what) -> Status {
      broken = Error{Errc::ipc, "waste-ioserver (pid " + std::to_string(daemon_pid) + ") " + what};
      return std::unexpected(*broken);
    };
    // SYNC POINT: acquire pairs with the daemon's release store of shutting_down in IoServer::stop.
    if (view.header().shutting_down.load(std::memory_order_acquire) != 0) return fail("stopped");
    if (!daemon_watch || daemon_watch->dead()) return fail("is gone");
    const ipc::ClientShm& me = view.client(client_idx);
    // SYNC POINT: acquire pairs with the daemon's release store of state at attach / free_client.
    if (me.state.load(std::memory_order_acquire) != std::uint32_t(ipc::ClientState::attached) ||
        me.generation.load(std::memory_order_relaxed) != lease.generation) {
      const std::string why = ipc::read_error_text(me);
      if (why.find("broke the ring protocol") != std::string::npos) return fail("dropped this client: " + why);
      return fail("dropped this client (lease " + std::to_string(client_idx) + " reclaimed)");
    }
    return ok();
  }

  Status push(std::uint64_t entry) {
    while (!requests->try_push(entry)) {
      ipc::ring_doorbell(wake->work);
      WASTE_TRY(check_daemon());
      std::this_thread::sleep_for(50us);
    }
    return ok();
  }

  // Takes every completion there is. The page bytes a completion names were written by a daemon
  // reader thread before the daemon marked the page ready under its mutex and pushed the entry:
  // the pop's acquire of the completion tail (RingConsumer) pairs with that push's release, so
  // the bytes are visible here, and our pin keeps the slot from being reused until release.
  void drain() {
    while (auto e = completions->try_pop()) {
      if (!ipc::is_engram_completion(*e)) continue;  // not ours (this lease sends no expert demands)
      const ipc::EngramCompletion c = ipc::decode_engram_completion(*e);
      if (c.tag >= batch.size() || batch[c.tag].state != PageState::pending) continue;
      Demand& d = batch[c.tag];
      if (c.error) {
        d.state = ipc::CompletionError(c.value) == ipc::CompletionError::arena_full ? PageState::full : PageState::failed;
        d.error = ipc::read_error_text(view.client(client_idx));
      } else if (c.value >= pool_pages) {
        d.state = PageState::failed;
        d.error = "waste-ioserver sent Engram pool slot " + std::to_string(c.value) + " of " + std::to_string(pool_pages);
      } else {
        d.state = PageState::ready;
        d.slot = c.value;
        d.miss = c.miss;
      }
    }
  }

  Status wait_batch() {
    for (;;) {
      drain();
      if (std::none_of(batch.begin(), batch.end(), [](const Demand& d) { return d.state == PageState::pending; })) {
        return ok();
      }
      completions->wait(kSpin, kWaitSlice);
      if (completions->empty()) WASTE_TRY(check_daemon());
    }
  }

  Status release() {
    WASTE_TRY(push(ipc::encode_engram_request(ipc::RequestKind::engram_release, 0, 0, 0)));
    ipc::ring_doorbell(wake->work);
    return ok();
  }

  Status read_rows(std::size_t l, std::span<const std::uint64_t> rows, std::span<float> out) {
    if (l >= tables.size()) {
      return make_error(Errc::argument, "engram rows: layer index " + std::to_string(l) + " of " +
                                            std::to_string(tables.size()) + " tables");
    }
    const std::size_t w = std::size_t(width);
    if (out.size() != rows.size() * w) {
      return make_error(Errc::argument, "engram rows: " + std::to_string(out.size()) + " floats for " +
                                            std::to_string(rows.size()) + " rows of " + std::to_string(w));
    }
    const TableGeometry& t = tables[l];
    for (std::uint64_t row : rows) {
      if (row >= t.rows) {
        return make_error(Errc::argument,
                          t.name + ": row " + std::to_string(row) + " beyond its " + std::to_string(t.rows) + " rows");
      }
    }
    std::lock_guard lock(mu);
    WASTE_TRY(check_daemon());
    std::vector<std::uint64_t> pages;
    pages.reserve(rows.size());
    for (std::uint64_t row : rows) pages.push_back(row / t.rows_per_page);
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    const std::size_t batch_max = std::max<std::size_t>(1, std::min<std::size_t>(kMaxBatch, pool_pages / 2));
    std::size_t next = 0;
    int full_rounds = 0;
    while (next < pages.size()) {
      batch.clear();
      while (batch.size() < batch_max && next < pages.size()) {
        batch.push_back(Demand{pages[next++], PageState::pending, 0, false, {}});
      }
      for (std::size_t tag = 0; tag < batch.size(); ++tag) {
        WASTE_TRY(push(ipc::encode_engram_request(ipc::RequestKind::engram_demand, int(t.index), batch[tag].page,
                                                  std::uint32_t(tag))));
      }
      ipc::ring_doorbell(wake->work);
      WASTE_TRY(wait_batch());
      // Rows of the pages that landed, decoded in place from the pinned slots (batch is sorted).
      for (const Demand& d : batch) {
        if (d.state == PageState::ready && d.miss) stats.bytes_read += ipc::kEngramPageBytes;
      }
      std::optional<Error> failure;
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const std::uint64_t page = rows[i] / t.rows_per_page;
        const auto it = std::lower_bound(batch.begin(), batch.end(), page,
                                         [](const Demand& d, std::uint64_t p) { return d.page < p; });
        if (it == batch.end() || it->page != page) continue;
        if (it->state == PageState::failed && !failure) {
          std::string text = it->error;
          if (!text.starts_with(t.name)) text = t.name + ": row " + std::to_string(rows[i]) + ": " + text;
          failure = Error{Errc::io, text};
        }
        if (it->state != PageState::ready) continue;
        const std::byte* bytes = view.engram_page(it->slot) + (rows[i] % t.rows_per_page) * t.row_bytes;
        dequantize_engram_row(t.bits, std::span(bytes, t.row_bytes), out.subspan(i * w, w));
        if (it->miss) ++stats.misses; else ++stats.hits;
      }
      WASTE_TRY(release());
      if (failure) return std::unexpected(*failure);
      // Pages refused because other clients pin the whole pool: asked for again after this
      // client's release, with the pages not asked for yet, a bounded number of rounds.
      std::vector<std::uint64_t> retry;
      std::string full_text;
      for (const Demand& d : batch) {
        if (d.state == PageState::full) {
          retry.push_back(d.page);
          full_text = d.error;
        }
      }
      if (retry.empty()) continue;
      if (++full_rounds > kFullRetries) {
        return make_error(Errc::io, full_text + " (still after " + std::to_string(kFullRetries) + " tries)");
      }
      std::this_thread::sleep_for(1ms);
      retry.insert(retry.end(), pages.begin() + std::ptrdiff_t(next), pages.end());
      std::sort(retry.begin(), retry.end());  // each batch is a slice of a sorted list (the lookup above)
      pages = std::move(retry);
      next = 0;
    }
    return ok();
  }

  void prefetch(std::size_t l, std::span<const std::uint64_t> rows) {
    if (l >= tables.size() || rows.empty()) return;
    const TableGeometry& t = tables[l];
    std::vector<std::uint64_t> pages;
    pages.reserve(rows.size());
    for (std::uint64_t row : rows) {
      if (row < t.rows) pages.push_back(row / t.rows_per_page);
    }
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    std::lock_guard lock(mu);
    if (broken) return;
    bool pushed = false;
    for (std::uint64_t p : pages) {
      // Speculative: never wait for ring space.
      if (!requests->try_push(ipc::encode_engram_request(ipc::RequestKind::engram_prefetch, int(t.index), p, 0))) break;
      ++stats.prefetched;
      pushed = true;
    }
    if (pushed) ipc::ring_doorbell(wake->work);
  }
};

DaemonEngramRows::DaemonEngramRows(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DaemonEngramRows::~DaemonEngramRows() = default;

Result<std::unique_ptr<DaemonEngramRows>> DaemonEngramRows::open(const ipc::ClientLease& lease,
                                                                 const engram::EngramLayout& layout) {
  auto impl = std::make_unique<Impl>();
  impl->lease = lease;
  std::span<const std::byte> arena, rings, wake;
  std::string arena_name = lease.segment_name, ring_name = lease.ring_segment_name, wake_name = lease.wake_segment_name;
  if (lease.mappings) {
    arena = lease.mappings->arena;
    rings = lease.mappings->rings;
    wake = lease.mappings->wake;
    impl->private_keep_alive = lease.mappings->keep_alive;
    arena_name = "(private arena)";
    ring_name = "(private rings)";
    wake_name = "(private wake)";
  } else {
    const std::filesystem::path dir = lease.shm_dir.empty() ? ipc::kDefaultShmDir : std::filesystem::path(lease.shm_dir);
    if (ring_name.empty()) ring_name = ipc::ring_segment_name_for_arena(arena_name, lease.client_idx, lease.generation);
    if (wake_name.empty()) wake_name = ipc::wake_segment_name_for_arena(arena_name);
    auto a = ipc::ShmSegment::open(dir, arena_name, /*writable=*/false);
    if (!a) return make_error(Errc::ipc, "cannot map waste-ioserver segment " + arena_name + ": " + a.error().message);
    auto r = ipc::ShmSegment::open(dir, ring_name, /*writable=*/true);
    if (!r) return make_error(Errc::ipc, "cannot map this lease's ring segment " + ring_name + ": " + r.error().message);
    auto w = ipc::ShmSegment::open(dir, wake_name, /*writable=*/true);
    if (!w) return make_error(Errc::ipc, "cannot map waste-ioserver segment " + wake_name + ": " + w.error().message);
    impl->arena_seg = std::move(*a);
    impl->ring_seg = std::move(*r);
    impl->wake_seg = std::move(*w);
    arena = impl->arena_seg.bytes();
    rings = impl->ring_seg.bytes();
    wake = impl->wake_seg.bytes();
  }
  auto view = ipc::ArenaView::attach(arena, arena_name);
  if (!view) return std::unexpected(view.error());
  impl->view = *view;
  WASTE_TRY(ipc::check_ring_segment(rings, ring_name, lease.client_idx, lease.generation));
  WASTE_TRY(ipc::check_wake_segment(wake, wake_name));
  auto* ring_shm = reinterpret_cast<ipc::RingSegmentShm*>(const_cast<std::byte*>(rings.data()));
  impl->wake = reinterpret_cast<ipc::WakeShm*>(const_cast<std::byte*>(wake.data()));
  const ipc::ControlHeaderShm& h = impl->view.header();
  if (lease.client_idx < 0 || lease.client_idx >= int(h.max_clients)) {
    return make_error(Errc::ipc, "lease names client " + std::to_string(lease.client_idx) + " of " +
                                     std::to_string(h.max_clients));
  }
  impl->client_idx = lease.client_idx;
  impl->daemon_pid = h.daemon_pid;
  impl->pool_pages = impl->view.layout().n_engram_pages;
  impl->width = layout.head_dim;
  const std::string daemon = "waste-ioserver (pid " + std::to_string(h.daemon_pid) + ")";
  for (const engram::EngramLayer& layer : layout.layers) {
    const std::string name = engram_table_file_name(layer.layer);
    std::optional<std::uint32_t> found;
    for (std::uint32_t t = 0; t < impl->view.layout().n_engram_tables; ++t) {
      if (impl->view.engram_table(t).layer == std::uint32_t(layer.layer)) found = t;
    }
    if (!found) return make_error(Errc::ipc, daemon + " serves no Engram table " + name);
    const ipc::EngramTableShm& s = impl->view.engram_table(*found);
    if (s.rows != layer.rows() || int(s.width) != layout.head_dim) {
      return make_error(Errc::ipc, daemon + " serves " + name + " with " + std::to_string(s.rows) + " rows of " +
                                       std::to_string(s.width) + " columns, engram.json says " +
                                       std::to_string(layer.rows()) + " of " + std::to_string(layout.head_dim));
    }
    if (s.rows_per_page == 0 || s.row_bytes == 0 || std::uint64_t(s.rows_per_page) * s.row_bytes > ipc::kEngramPageBytes ||
        (s.bits != 4 && s.bits != 8)) {
      return make_error(Errc::ipc, daemon + " describes " + name + " inconsistently");
    }
    impl->tables.push_back(
        TableGeometry{*found, name, int(s.bits), s.rows, s.pages, s.row_bytes, s.rows_per_page});
  }
  if (!layout.layers.empty() && impl->pool_pages == 0) return make_error(Errc::ipc, daemon + " has no Engram pool");
  const ipc::ClientShm& me = impl->view.client(lease.client_idx);
  if (me.generation.load(std::memory_order_relaxed) != lease.generation ||
      me.state.load(std::memory_order_acquire) != std::uint32_t(ipc::ClientState::attached)) {
    return make_error(Errc::ipc, "lease for client " + std::to_string(lease.client_idx) + " is no longer valid");
  }
  impl->requests.emplace(ring_shm->request);
  impl->completions.emplace(ring_shm->completion);
  if (auto w = ipc::ProcessWatch::open(impl->daemon_pid);
      w && (h.daemon_start_ticks == 0 || w->start_ticks() == h.daemon_start_ticks)) {
    impl->daemon_watch = std::move(*w);
  }
  WASTE_TRY(impl->check_daemon());
  return std::unique_ptr<DaemonEngramRows>(new DaemonEngramRows(std::move(impl)));
}

std::size_t DaemonEngramRows::layers() const noexcept { return impl_->tables.size(); }
int DaemonEngramRows::width() const noexcept { return impl_->width; }
Status DaemonEngramRows::read_rows(std::size_t layer_index, std::span<const std::uint64_t> rows, std::span<float> out) {
  return impl_->read_rows(layer_index, rows, out);
}
void DaemonEngramRows::prefetch(std::size_t layer_index, std::span<const std::uint64_t> rows) {
  impl_->prefetch(layer_index, rows);
}
engram::EngramRowStats DaemonEngramRows::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

}  // namespace waste

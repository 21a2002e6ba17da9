#include "compute/io/daemon_expert_source.hpp"

#include <unistd.h>

#include <filesystem>
#include <thread>
#include <unordered_map>

#include "shared/ipc/container_identity.hpp"
#include "shared/ipc/process_liveness.hpp"
#include "shared/ipc/segment_names.hpp"
#include "shared/ipc/shm_segment.hpp"

namespace waste {

using namespace std::chrono_literals;

namespace {

constexpr int kAcquireSpin = 4000;                  // polls before sleeping on the completion futex
constexpr auto kWaitSlice = 50ms;                    // futex timeout between liveness checks

enum class KeyState : std::uint8_t { none, pending, ready, failed };

}  // namespace

struct DaemonExpertSource::Impl {
  ipc::ClientLease lease;
  ExpertGeometry geometry;
  // The mappings: named segments opened here, or an in-process IoServer's private ones.
  ipc::ShmSegment arena_seg, ring_seg, wake_seg;
  std::shared_ptr<const void> private_keep_alive;
  ipc::ArenaView view;                 // read-only mapping: only ever loaded from
  ipc::RingSegmentShm* rings = nullptr;
  ipc::WakeShm* wake = nullptr;
  int client_idx = 0;
  // Copied from the header at open (after ArenaView::attach checked it): later header bytes are
  // never trusted for an address, a size or a liveness decision.
  int n_layers = 0, n_experts = 0;
  int daemon_pid = 0;
  std::uint64_t daemon_start_ticks = 0;
  std::optional<ipc::ProcessWatch> daemon_watch;  // pidfd (or pid + start time): verified death only
  std::optional<ipc::RingProducer> requests;
  std::optional<ipc::RingConsumer> completions;

  std::vector<KeyState> state;         // per key (layer * n_experts + expert)
  std::vector<std::uint32_t> slot_of;  // per key, valid when ready
  std::vector<std::vector<int>> layer_keys;  // experts requested per layer since its release
  std::unordered_map<std::uint32_t, std::string> failure;  // error text of failed keys
  std::vector<unsigned char> handed;   // per id of the current request: returned by acquire_next
  int outstanding = 0;                 // demands sent, completion not yet seen

  std::optional<Error> broken;         // sticky: the daemon is gone or the lease was lost
  ExpertSourceStats stats;

  std::size_t index(int layer, int expert) const { return std::size_t(layer) * std::size_t(n_experts) + std::size_t(expert); }
  bool in_range(int layer, int expert) const { return layer >= 0 && layer < n_layers && expert >= 0 && expert < n_experts; }
  ipc::ControlHeaderShm& header() const { return view.header(); }

  // Liveness: stopped flag, the process (pidfd, or pid + start time; a zombie is dead), our lease.
  // Never the heartbeat: a daemon that is alive but late (SIGSTOP, paging, a starved VM) is waited
  // for, since it will answer; only a verified death or a lost lease fails, and that stays failed.
  Status check_daemon() {
    if (broken) return std::unexpected(*broken);
    const int pid = daemon_pid;
    auto fail = [&](std::string what) -> Status {
      broken = Error{Errc::ipc, "waste-ioserver (pid " + std::to_string(pid) + ") " + what};
      return std::unexpected(*broken);
    };
    // A daemon that died keeps its log: say where it is.
    auto gone = [&](std::string what) -> Status {
      std::error_code ec;
      if (!lease.daemon_log.empty() && std::filesystem::exists(lease.daemon_log, ec)) {
        what += " (its log: " + lease.daemon_log + ")";
      }
      return fail(std::move(what));
    };
    // SYNC POINT: acquire pairs with the daemon's release store in IoServer::stop.
    if (header().shutting_down.load(std::memory_order_acquire) != 0) return fail("stopped");
    if (!daemon_watch || daemon_watch->dead()) return gone("is gone");
    const ipc::ClientShm& me = view.client(client_idx);
    if (me.state.load(std::memory_order_acquire) != std::uint32_t(ipc::ClientState::attached) ||
        me.generation.load(std::memory_order_relaxed) != lease.generation) {
      // A breach leaves its reason in the block; say it.
      const std::string why = read_error_text(me);
      if (why.find("broke the ring protocol") != std::string::npos) return fail("dropped this client: " + why);
      return fail("dropped this client (lease " + std::to_string(client_idx) + " reclaimed)");
    }
    return ok();
  }

  void apply(const ipc::Completion& c) {
    if (!in_range(c.layer, c.expert)) return;
    const std::size_t k = index(c.layer, c.expert);
    if (state[k] != KeyState::pending) return;  // released meanwhile: nothing to do
    --outstanding;
    if (c.error) {
      state[k] = KeyState::failed;
      failure[ipc::make_key(c.layer, c.expert)] = read_error_text(view.client(client_idx));
      return;
    }
    if (c.value >= view.layout().n_slots) {
      state[k] = KeyState::failed;
      failure[ipc::make_key(c.layer, c.expert)] = "waste-ioserver sent slot " + std::to_string(c.value) +
                                                   " of " + std::to_string(view.layout().n_slots);
      return;
    }
    state[k] = KeyState::ready;
    slot_of[k] = c.value;
    if (c.miss) ++stats.misses; else ++stats.hits;
  }

  void drain_completions() {
    while (auto e = completions->try_pop()) apply(ipc::decode_completion(*e));
  }

  // Push one request; waits (bounded by daemon liveness) while the ring is full.
  Status push(std::uint64_t entry) {
    while (!requests->try_push(entry)) {
      ipc::ring_doorbell(wake->work);
      WASTE_TRY(check_daemon());
      std::this_thread::sleep_for(50us);
    }
    return ok();
  }

  void ring_daemon() { ipc::ring_doorbell(wake->work); }

  // Wait for one more completion (or a timeout slice); fails when the daemon is gone.
  Status wait_completion() {
    const auto t0 = std::chrono::steady_clock::now();
    completions->wait(kAcquireSpin, kWaitSlice);
    stats.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (completions->empty()) return check_daemon();
    return ok();
  }

  Result<std::span<const std::byte>> acquire_bytes(int layer, int expert) {
    if (broken) return std::unexpected(*broken);
    if (!in_range(layer, expert)) {
      return make_error(Errc::argument, "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                                            ": outside this container's " + std::to_string(n_layers) + " layers x " +
                                            std::to_string(n_experts) + " experts");
    }
    const std::size_t k = index(layer, expert);
    if (state[k] == KeyState::none) {
      const int id = expert;
      WASTE_TRY(request(layer, std::span<const int>(&id, 1)));
    }
    for (;;) {
      drain_completions();
      if (state[k] == KeyState::ready) {
        return std::span<const std::byte>(view.slot_data(slot_of[k]), view.layout().record_bytes);
      }
      if (state[k] == KeyState::failed) {
        const auto it = failure.find(ipc::make_key(layer, expert));
        std::string text = it != failure.end() ? it->second : "failed";
        const std::string name = "expert " + std::to_string(expert) + " of layer " + std::to_string(layer);
        if (text.rfind(name, 0) != 0) text = name + ": " + text;  // always name the record
        return make_error(Errc::io, text);
      }
      WASTE_TRY(wait_completion());
    }
  }

  Status request(int layer, std::span<const int> experts) {
    if (broken) return std::unexpected(*broken);
    bool pushed = false;
    for (int expert : experts) {
      if (!in_range(layer, expert)) {
        return make_error(Errc::argument, "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                                              ": outside this container's " + std::to_string(n_layers) +
                                              " layers x " + std::to_string(n_experts) + " experts");
      }
      const std::size_t k = index(layer, expert);
      if (state[k] != KeyState::none) continue;  // already asked for since the last release
      if (outstanding >= int(ipc::kRingCapacity) - 1) {
        return make_error(Errc::argument, "more than " + std::to_string(ipc::kRingCapacity - 1) +
                                              " outstanding expert requests");
      }
      WASTE_TRY(push(ipc::encode_request(ipc::RequestKind::demand, layer, expert)));
      state[k] = KeyState::pending;
      layer_keys[std::size_t(layer)].push_back(expert);
      ++outstanding;
      pushed = true;
    }
    if (pushed) ring_daemon();
    return ok();
  }

  void release_layer(int layer) {
    if (layer < 0 || layer >= n_layers) return;
    auto& keys = layer_keys[std::size_t(layer)];
    // Every demand gets exactly one completion; collect them before the release so a late
    // completion can never be mistaken for a later request of the same record.
    for (int expert : keys) {
      while (!broken && state[index(layer, expert)] == KeyState::pending) {
        drain_completions();
        if (state[index(layer, expert)] != KeyState::pending) break;
        if (!wait_completion()) break;
      }
    }
    for (int expert : keys) {
      const std::uint32_t key = ipc::make_key(layer, expert);
      if (state[index(layer, expert)] == KeyState::failed) failure.erase(key);
      if (state[index(layer, expert)] == KeyState::pending) --outstanding;
      state[index(layer, expert)] = KeyState::none;
    }
    keys.clear();
    if (broken) return;
    if (push(ipc::encode_request(ipc::RequestKind::release_layer, layer, 0))) ring_daemon();
  }

  Result<ReadyExpert> acquire_next(int layer, int requested_layer, std::span<const int> ids) {
    if (broken) return std::unexpected(*broken);
    for (;;) {
      drain_completions();
      bool pending = false;
      for (std::size_t i = 0; layer == requested_layer && i < ids.size() && i < handed.size(); ++i) {
        if (handed[i]) continue;
        pending = true;
        const KeyState st = in_range(layer, ids[i]) ? state[index(layer, ids[i])] : KeyState::failed;
        if (st == KeyState::pending) continue;
        handed[i] = 1;
        auto bytes = acquire_bytes(layer, ids[i]);  // landed: returns without waiting
        if (!bytes) return std::unexpected(bytes.error());
        return ReadyExpert{int(i), make_expert_view(*bytes, geometry)};
      }
      if (!pending) {
        return make_error(Errc::argument, "acquire_next on layer " + std::to_string(layer) +
                                              ": no record left in the current request");
      }
      WASTE_TRY(wait_completion());
    }
  }

  void prefetch(int layer, std::span<const int> experts) {
    if (broken) return;
    bool pushed = false;
    for (int expert : experts) {
      if (!in_range(layer, expert) || state[index(layer, expert)] != KeyState::none) continue;
      // Speculative: never wait for ring space.
      if (!requests->try_push(ipc::encode_request(ipc::RequestKind::prefetch, layer, expert))) break;
      ++stats.prefetch_issued;
      pushed = true;
    }
    if (pushed) ring_daemon();
  }
};

DaemonExpertSource::DaemonExpertSource(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DaemonExpertSource::~DaemonExpertSource() = default;

namespace {

// The daemon's identity table against the files this client would open.
Status check_identity(const ipc::ArenaView& view, const std::filesystem::path& container, int daemon_pid) {
  const ipc::ControlHeaderShm& h = view.header();
  auto mine = ipc::container_identity(container, int(h.n_layers));
  if (!mine) return std::unexpected(mine.error());
  const std::string daemon = "waste-ioserver (pid " + std::to_string(daemon_pid) + ")";
  if (mine->path_hash != h.container_path_hash) {
    return make_error(Errc::ipc, daemon + " serves another container than " + mine->canonical.string() +
                                     " (its canonical path differs)");
  }
  if (h.n_identity_files == 0) return ok();  // a daemon with an injected reader: path only
  for (const auto& f : mine->files) {
    const ipc::FileIdentityShm* theirs = nullptr;
    for (std::uint32_t i = 0; i < h.n_identity_files; ++i) {
      if (view.identity(i).name_hash == f.name_hash) theirs = &view.identity(i);
    }
    const std::string file = (mine->canonical / f.name).string();
    if (theirs == nullptr) {
      return make_error(Errc::ipc, "container " + mine->canonical.string() + ": " + daemon + " did not open " + f.name);
    }
    auto differs = [&](const char* what, auto a, auto b) -> Status {
      return make_error(Errc::ipc, "container " + mine->canonical.string() + ": " + file + " differs from the file " +
                                       daemon + " opened (" + what + " " + std::to_string(a) + " here, " +
                                       std::to_string(b) + " there): restart the daemon or open the same files");
    };
    if (theirs->inode != f.inode || theirs->device != f.device) return differs("inode", f.inode, theirs->inode);
    if (theirs->size != f.size) return differs("size", f.size, theirs->size);
    if (theirs->mtime_ns != f.mtime_ns) return differs("mtime_ns", f.mtime_ns, theirs->mtime_ns);
  }
  return ok();
}

}  // namespace

Result<std::unique_ptr<DaemonExpertSource>> DaemonExpertSource::open(const ipc::ClientLease& lease,
                                                                     const ExpertGeometry& geometry) {
  return open(lease, geometry, OpenOptions{});
}

Result<std::unique_ptr<DaemonExpertSource>> DaemonExpertSource::open(const ipc::ClientLease& lease,
                                                                     const ExpertGeometry& geometry,
                                                                     const OpenOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->lease = lease;
  impl->geometry = geometry;
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
    // The arena is read-only here: the daemon never trusts it, and this process cannot scribble it.
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
  impl->rings = reinterpret_cast<ipc::RingSegmentShm*>(const_cast<std::byte*>(rings.data()));
  impl->wake = reinterpret_cast<ipc::WakeShm*>(const_cast<std::byte*>(wake.data()));
  const ipc::ControlHeaderShm& h = impl->view.header();
  if (lease.client_idx < 0 || lease.client_idx >= int(h.max_clients)) {
    return make_error(Errc::ipc, "lease names client " + std::to_string(lease.client_idx) + " of " +
                                     std::to_string(h.max_clients));
  }
  if (geometry.record_bytes != 0 && geometry.record_bytes != h.record_bytes) {
    return make_error(Errc::ipc, "waste-ioserver serves " + std::to_string(h.record_bytes) +
                                     "-byte records, this model expects " + std::to_string(geometry.record_bytes) +
                                     " (different container?)");
  }
  if (!options.container.empty()) WASTE_TRY(check_identity(impl->view, options.container, h.daemon_pid));
  impl->client_idx = lease.client_idx;
  impl->n_layers = int(h.n_layers);
  impl->n_experts = int(h.n_experts);
  impl->daemon_pid = h.daemon_pid;
  impl->daemon_start_ticks = h.daemon_start_ticks;
  const ipc::ClientShm& me = impl->view.client(lease.client_idx);
  if (me.generation.load(std::memory_order_relaxed) != lease.generation ||
      me.state.load(std::memory_order_acquire) != std::uint32_t(ipc::ClientState::attached)) {
    return make_error(Errc::ipc, "lease for client " + std::to_string(lease.client_idx) + " is no longer valid");
  }
  impl->requests.emplace(impl->rings->request);
  impl->completions.emplace(impl->rings->completion);
  const std::size_t n_keys = std::size_t(impl->n_layers) * std::size_t(impl->n_experts);
  impl->state.assign(n_keys, KeyState::none);
  impl->slot_of.assign(n_keys, 0);
  impl->layer_keys.resize(std::size_t(impl->n_layers));
  for (auto& k : impl->layer_keys) k.reserve(std::size_t(impl->n_experts));
  impl->handed.reserve(std::size_t(impl->n_experts));
  // The watch names the daemon that started at the header's start time; a pid reused since then
  // (or a daemon already gone) leaves it empty, which check_daemon reports as gone.
  if (auto w = ipc::ProcessWatch::open(impl->daemon_pid);
      w && (impl->daemon_start_ticks == 0 || w->start_ticks() == impl->daemon_start_ticks)) {
    impl->daemon_watch = std::move(*w);
  }
  WASTE_TRY(impl->check_daemon());
  return std::unique_ptr<DaemonExpertSource>(new DaemonExpertSource(std::move(impl)));
}

Status DaemonExpertSource::request(int layer, std::span<const int> experts) {
  impl_->handed.assign(experts.size(), 0);  // capacity reserved at open: no allocation
  return impl_->request(layer, experts);
}

Result<ReadyExpert> DaemonExpertSource::acquire_next(int layer) {
  return impl_->acquire_next(layer, requested_layer(), requested());
}

std::uint64_t DaemonExpertSource::cache_capacity_records() const { return impl_->view.layout().n_slots; }

Result<ExpertView> DaemonExpertSource::acquire(int layer, int expert) {
  auto bytes = impl_->acquire_bytes(layer, expert);
  if (!bytes) return std::unexpected(bytes.error());
  // The daemon validated the header when it read the record; cache hits are not re-checked.
  ExpertView v = make_expert_view(*bytes, impl_->geometry);
  return v;
}

Result<std::span<const std::byte>> DaemonExpertSource::acquire_bytes(int layer, int expert) {
  return impl_->acquire_bytes(layer, expert);
}

void DaemonExpertSource::release_layer(int layer) { impl_->release_layer(layer); }
void DaemonExpertSource::prefetch(int layer, std::span<const int> experts) { impl_->prefetch(layer, experts); }

ExpertSourceStats DaemonExpertSource::stats() const {
  ExpertSourceStats s = impl_->stats;
  s.bytes_read = impl_->view.client(impl_->client_idx).bytes_read.load(std::memory_order_relaxed);
  return s;
}

bool DaemonExpertSource::direct_io() const { return impl_->view.header().direct_io != 0; }
std::uint64_t DaemonExpertSource::record_bytes() const { return impl_->view.layout().record_bytes; }
int DaemonExpertSource::daemon_pid() const { return impl_->daemon_pid; }

Result<SharedTrunkImage> map_trunk_segment(const ipc::ClientLease& lease) {
  if (lease.mappings && !lease.mappings->trunk.empty()) {
    return SharedTrunkImage{lease.mappings->trunk, lease.mappings->keep_alive};
  }
  if (lease.trunk_segment_name.empty()) return make_error(Errc::ipc, "waste-ioserver serves no trunk segment");
  const std::filesystem::path dir = lease.shm_dir.empty() ? ipc::kDefaultShmDir : std::filesystem::path(lease.shm_dir);
  auto seg = ipc::ShmSegment::open(dir, lease.trunk_segment_name, /*writable=*/false);
  if (!seg) return make_error(Errc::ipc, "cannot map trunk segment " + lease.trunk_segment_name + ": " + seg.error().message);
  if (seg->size() < lease.trunk_bytes) {
    return make_error(Errc::ipc, "trunk segment " + lease.trunk_segment_name + " is shorter than announced");
  }
  auto held = std::make_shared<ipc::ShmSegment>(std::move(*seg));
  SharedTrunkImage image;
  image.image = std::span<const std::byte>(held->data(), lease.trunk_bytes);
  image.keep_alive = held;
  return image;
}

}  // namespace waste

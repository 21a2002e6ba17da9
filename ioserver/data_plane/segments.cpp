// IoServer's segments: the free-space check, the arena (read-only to clients), the wake
// doorbell, the trunk image, one ring segment per lease, and the removal of a dead daemon's files.
#include <unistd.h>

#include <new>

#include "ioserver/data_plane/io_server_impl.hpp"
#include "shared/ipc/segment_names.hpp"

namespace waste {

namespace {

std::uint64_t round_up(std::uint64_t v, std::uint64_t block) { return (v + block - 1) / block * block; }

// Remove the files a dead daemon of this instance left behind; refuse if it still runs.
Status clear_stale_segments(const std::filesystem::path& dir, const std::string& instance) {
  const std::string arena_name = ipc::arena_segment_name(instance);
  if (auto old = ipc::ShmSegment::open(dir, arena_name, false);
      old && old->size() >= sizeof(ipc::ControlHeaderShm)) {
    const auto* h = reinterpret_cast<const ipc::ControlHeaderShm*>(old->data());
    if (h->magic == ipc::kArenaMagic && ipc::process_alive(h->daemon_pid, h->daemon_start_ticks)) {
      return make_error(Errc::ipc, "instance '" + instance + "' is already served by waste-ioserver pid " +
                                       std::to_string(h->daemon_pid));
    }
  }
  std::error_code ec;
  for (const std::string& name : {arena_name, ipc::trunk_segment_name(instance), ipc::wake_segment_name(instance)}) {
    std::filesystem::remove(dir / name, ec);
  }
  // Ring segments of every lease the dead daemon had handed out.
  const std::string rings = ipc::ring_segment_prefix(instance);
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(rings) && name.find("_g", rings.size()) != std::string::npos) {
      std::filesystem::remove(entry.path(), ec);
    }
  }
  return ok();
}

Result<std::shared_ptr<ipc::ShmSegment>> make_segment(bool private_memory, const std::filesystem::path& dir,
                                                      const std::string& name, std::uint64_t bytes) {
  auto seg = private_memory ? ipc::ShmSegment::create_private(bytes) : ipc::ShmSegment::create(dir, name, bytes);
  if (!seg) return std::unexpected(seg.error());
  return std::make_shared<ipc::ShmSegment>(std::move(*seg));
}

}  // namespace

Status IoServer::Impl::create_segments(const Parts& parts) {
  const bool priv = config.private_memory;
  if (!priv) {
    WASTE_TRY(clear_stale_segments(shm_dir, config.instance));
    segment_name = ipc::arena_segment_name(config.instance);
    wake_name = ipc::wake_segment_name(config.instance);
    // Everything this instance can ever hold there at once, each file rounded to the block size
    // (the huge page on hugetlbfs): a full tmpfs would otherwise surface as SIGBUS on first touch.
    auto space = ipc::shm_space(shm_dir);
    if (!space) return std::unexpected(space.error());
    const std::uint64_t block = space->block_bytes > 0 ? space->block_bytes : 4096;
    std::uint64_t needed = round_up(layout.total_bytes, block) + round_up(sizeof(ipc::WakeShm), block) +
                           std::uint64_t(config.max_clients) * round_up(sizeof(ipc::RingSegmentShm), block);
    if (parts.trunk_bytes > 0) needed += round_up(parts.trunk_bytes, block);
    WASTE_TRY(ipc::check_shm_space(shm_dir, needed));
  }

  auto a = make_segment(priv, shm_dir, segment_name, layout.total_bytes);
  if (!a) return std::unexpected(a.error());
  arena = std::move(*a);
  std::byte* base = arena->data();
  // The memory arrives zero-filled; construct the objects formally before anyone uses them.
  auto* h = new (base) ipc::ControlHeaderShm{};
  h->layout_version = ipc::kLayoutVersion;
  h->header_bytes = sizeof(ipc::ControlHeaderShm);
  h->total_bytes = layout.total_bytes;
  h->record_bytes = layout.record_bytes;
  h->slot_bytes = layout.slot_bytes;
  h->n_slots = layout.n_slots;
  h->max_clients = layout.max_clients;
  h->n_layers = std::uint32_t(n_layers);
  h->n_experts = std::uint32_t(n_experts);
  h->slots_offset = layout.slots_offset;
  h->clients_offset = layout.clients_offset;
  h->identity_offset = layout.identity_offset;
  h->arena_offset = layout.arena_offset;
  h->engram_tables_offset = layout.engram_tables_offset;
  h->engram_pages_offset = layout.engram_pages_offset;
  h->n_engram_tables = layout.n_engram_tables;
  h->n_engram_pages = layout.n_engram_pages;
  h->n_identity_files = layout.n_identity_files;
  h->trunk_bytes = parts.trunk_bytes;
  h->daemon_pid = int(::getpid());
  h->direct_io = reader->direct_io_engaged() ? 1 : 0;
  h->daemon_start_ticks = ipc::process_start_ticks(::getpid()).value_or(0);
  h->usable_slots.store(layout.n_slots, std::memory_order_relaxed);
  view = ipc::ArenaView(base, layout);
  if (parts.identity) {
    h->container_path_hash = parts.identity->path_hash;
    for (std::uint32_t i = 0; i < layout.n_identity_files; ++i) {
      const auto& f = parts.identity->files[i];
      view.identity(i) = ipc::FileIdentityShm{f.name_hash, f.inode, f.device, f.size, f.mtime_ns, {}};
    }
  } else {
    std::error_code ec;
    const auto canonical = std::filesystem::weakly_canonical(config.container, ec);
    h->container_path_hash = ipc::fnv1a64((ec ? config.container : canonical).string());
  }
  for (std::uint32_t i = 0; i < layout.n_slots; ++i) new (&view.slot(i)) ipc::SlotShm{};
  for (std::uint32_t c = 0; c < layout.max_clients; ++c) new (&view.client(int(c))) ipc::ClientShm{};
  for (std::uint32_t t = 0; t < layout.n_engram_tables; ++t) {
    const auto& file = engram_reader->tables()[t];
    auto* shm = new (&view.engram_table(t)) ipc::EngramTableShm{};
    shm->layer = std::uint32_t(file.header.layer);
    shm->bits = std::uint32_t(file.header.bits);
    shm->rows = file.header.rows;
    shm->width = std::uint32_t(file.header.width);
    shm->row_bytes = file.header.row_bytes();
    shm->rows_per_page = file.header.rows_per_page();
    shm->page_bytes = file.header.page_bytes();
    shm->pages = file.pages;
  }
  // Magic last: a reader that validates the magic sees a fully initialised header.
  std::atomic_ref<std::uint64_t>(h->magic).store(ipc::kArenaMagic, std::memory_order_release);
  arena->make_read_only();  // clients can only map it read-only; this process keeps its mapping

  auto w = make_segment(priv, shm_dir, wake_name, sizeof(ipc::WakeShm));
  if (!w) return std::unexpected(w.error());
  wake = std::move(*w);
  wake_shm = new (wake->data()) ipc::WakeShm{};
  wake_shm->magic = ipc::kWakeMagic;
  wake_shm->layout_version = ipc::kLayoutVersion;

  if (parts.trunk_bytes > 0) {
    if (!priv) trunk_name = ipc::trunk_segment_name(config.instance);
    auto t = make_segment(priv, shm_dir, trunk_name, parts.trunk_bytes);
    if (!t) return std::unexpected(t.error());
    trunk = std::move(*t);
    WASTE_TRY(parts.trunk_fill(std::span<std::byte>(trunk->data(), parts.trunk_bytes)));
    trunk->make_read_only();  // clients map it read-only
  }
  return ok();
}

Result<std::shared_ptr<ipc::ShmSegment>> IoServer::Impl::create_ring_segment(int c, std::uint64_t generation,
                                                                             std::string& name) {
  name = config.private_memory ? std::string() : ipc::ring_segment_name(config.instance, c, generation);
  // A file of this name can only be left by a crash of an earlier daemon between attach and
  // cleanup; the generation is ours, so it is stale.
  if (!name.empty()) {
    std::error_code ec;
    std::filesystem::remove(shm_dir / name, ec);
  }
  auto seg = make_segment(config.private_memory, shm_dir, name, sizeof(ipc::RingSegmentShm));
  if (!seg) return std::unexpected(seg.error());
  auto* r = new ((*seg)->data()) ipc::RingSegmentShm{};
  r->header.magic = ipc::kRingsMagic;
  r->header.layout_version = ipc::kLayoutVersion;
  r->header.client_idx = c;
  r->header.generation = generation;
  return seg;
}

void IoServer::Impl::remove_segments() {
  for (auto& client : clients) {
    if (client.rings) client.rings->remove();
  }
  if (arena) arena->remove();
  if (wake) wake->remove();
  if (trunk) trunk->remove();
}

}  // namespace waste

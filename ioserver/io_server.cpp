// IoServer's life cycle: create (argument checks, the daemon-private layout, segments, threads),
// stop and destruction, and the small settings. The rest is in ioserver/data_plane/.
#include "ioserver/io_server.hpp"

#include "ioserver/data_plane/io_server_impl.hpp"
#include "shared/ipc/segment_names.hpp"

#include <algorithm>

namespace waste {

void IoServer::Impl::stop() {
  std::call_once(stop_once, [this] {
    stopping.store(true, std::memory_order_release);
    // Wake the service thread whether or not it counts as a sleeper.
    if (wake_shm != nullptr) {
      wake_shm->work.word.fetch_add(1, std::memory_order_release);
      ipc::futex_wake_shared(wake_shm->work.word);
    }
    if (service.joinable()) service.join();
    if (populator.joinable()) populator.join();
    if (readers) readers->stop();
    if (engram_readers) engram_readers->stop();
    if (!arena) return;
    // SYNC POINT: release pairs with the clients' acquire load of shutting_down in their waits.
    header().shutting_down.store(1, std::memory_order_release);
    std::lock_guard lock(mutex);
    for (const auto& client : clients) {
      if (client.attached) ipc::ring_doorbell(client.ring_shm().completion.bell);
    }
  });
}

IoServer::IoServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

IoServer::~IoServer() {
  if (!impl_) return;
  impl_->stop();
  impl_->remove_segments();
}

Result<std::unique_ptr<IoServer>> IoServer::create(const IoServerConfig& config, std::unique_ptr<RecordReader> reader) {
  Parts parts;
  parts.reader = std::move(reader);
  return create(config, std::move(parts));
}

Result<std::unique_ptr<IoServer>> IoServer::create(const IoServerConfig& config, Parts parts) {
  if (!config.private_memory) WASTE_TRY(ipc::validate_instance_name(config.instance));
  if (config.arena_slots < 1 || config.arena_slots > 0x3FFFFFFF) {
    return make_error(Errc::argument, "arena_slots must be 1..2^30, not " + std::to_string(config.arena_slots));
  }
  if (config.max_clients < 1 || config.max_clients > ipc::kMaxClients) {
    return make_error(Errc::argument, "max_clients must be 1..64, not " + std::to_string(config.max_clients));
  }
  if (config.reader_threads < 1 || config.reader_threads > 64) {
    return make_error(Errc::argument, "reader_threads must be 1..64, not " + std::to_string(config.reader_threads));
  }
  if (!parts.reader) return make_error(Errc::argument, "IoServer needs a record reader");
  // The ring entries carry 8-bit layers and 24-bit experts: refuse rather than truncate.
  if (parts.reader->n_layers() < 1 || parts.reader->n_layers() > ipc::kMaxLayers) {
    return make_error(Errc::argument, "container " + config.container.string() + " has " +
                                          std::to_string(parts.reader->n_layers()) + " layers; waste-ioserver serves 1.." +
                                          std::to_string(ipc::kMaxLayers));
  }
  if (parts.reader->n_experts() < 1 || parts.reader->n_experts() > ipc::kMaxExperts) {
    return make_error(Errc::argument, "container " + config.container.string() + " has " +
                                          std::to_string(parts.reader->n_experts()) +
                                          " experts per layer; waste-ioserver serves 1.." +
                                          std::to_string(ipc::kMaxExperts));
  }

  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->reader = std::move(parts.reader);
  impl->n_layers = impl->reader->n_layers();
  impl->n_experts = impl->reader->n_experts();
  impl->shm_dir = config.shm_dir.empty() ? ipc::kDefaultShmDir : config.shm_dir;
  const auto n_identity = parts.identity ? std::uint32_t(parts.identity->files.size()) : 0u;
  std::uint32_t n_engram_tables = 0, n_engram_pages = 0;
  if (!parts.engram_dir.empty()) {
    auto engram = EngramPageReader::open(parts.engram_dir, config.direct_io);
    if (!engram) return std::unexpected(engram.error());
    if (!(*engram)->tables().empty()) {
      impl->engram_reader = std::move(*engram);
      n_engram_tables = std::uint32_t(impl->engram_reader->tables().size());
      const std::uint64_t arena_bytes =
          config.arena_slots * ((impl->reader->record_bytes() + ipc::kSlotAlign - 1) / ipc::kSlotAlign * ipc::kSlotAlign);
      const std::uint64_t pages =
          config.engram_pool_pages != 0 ? config.engram_pool_pages : engram_pool_pages_for(arena_bytes);
      if (pages > 0x3FFFFFFF) {
        return make_error(Errc::argument, "engram_pool_pages must be 1..2^30, not " + std::to_string(pages));
      }
      n_engram_pages = std::uint32_t(pages);
      for (const auto& t : impl->engram_reader->tables()) impl->engram_pages.push_back(t.pages);
      impl->engram_counts.resize(n_engram_tables);
    }
  }
  impl->layout = ipc::ArenaLayout::compute(impl->reader->record_bytes(), std::uint32_t(config.arena_slots),
                                           std::uint32_t(config.max_clients), n_identity, n_engram_tables,
                                           n_engram_pages);
  if (auto st = impl->create_segments(parts); !st) {
    impl->remove_segments();
    return std::unexpected(st.error());
  }

  const std::uint32_t n_slots = impl->layout.n_slots;
  impl->cache = std::make_unique<ExpertCache>(std::span<ipc::SlotShm>(&impl->view.slot(0), n_slots), config.policy);
  impl->clients.resize(std::size_t(config.max_clients));
  for (auto& c : impl->clients) c.pinned.reserve(n_slots);
  impl->request_ring_of = std::make_unique<std::atomic<const ipc::RingShm*>[]>(std::size_t(config.max_clients));
  for (int c = 0; c < config.max_clients; ++c) impl->request_ring_of[std::size_t(c)].store(nullptr);
  Impl* raw = impl.get();
  impl->readers = std::make_unique<ReaderPool>(
      *impl->reader, config.reader_threads, n_slots,
      [raw](std::uint32_t slot) { return std::span<std::byte>(raw->view.slot_data(slot), raw->layout.record_bytes); },
      [raw](const ReaderPool::Job& job, const Status& status, std::chrono::nanoseconds elapsed) {
        raw->on_read_done(job, status, elapsed);
      });
  if (impl->engram_reader) {
    impl->engram_pool = std::make_unique<EngramPagePool>(impl->layout.n_engram_pages);
    for (auto& c : impl->clients) c.engram_pinned.reserve(std::min<std::uint32_t>(impl->layout.n_engram_pages, 4096));
    // Its own reader threads (as many as the records'): a page read never waits behind records.
    impl->engram_readers = std::make_unique<ReaderPool>(
        *impl->engram_reader, config.reader_threads, impl->layout.n_engram_pages,
        [raw](std::uint32_t slot) { return std::span<std::byte>(raw->view.engram_page(slot), ipc::kEngramPageBytes); },
        [raw](const ReaderPool::Job& job, const Status& status, std::chrono::nanoseconds) {
          raw->on_engram_read_done(job, status);
        });
  }
  for (int l = 0; l < impl->n_layers; ++l) {
    if (impl->reader->has_layer(l)) impl->fill_total += std::uint64_t(impl->n_experts);
  }
  impl->fill_pending.store(config.fill && impl->fill_total > 0);
  impl->service = std::thread([raw] { raw->service_loop(); });
  if (config.populate_arena) impl->populator = std::thread([raw] { raw->populate_arena(); });
  return std::unique_ptr<IoServer>(new IoServer(std::move(impl)));
}

Status IoServer::set_policy(CachePolicy policy) {
  std::lock_guard lock(impl_->mutex);
  impl_->cache->set_policy(policy);
  return ok();
}

Status IoServer::set_cache_slots(std::uint32_t usable_slots) {
  Impl& s = *impl_;
  if (usable_slots < 1) return make_error(Errc::argument, "set_cache_slots: at least 1 slot must stay usable");
  std::lock_guard lock(s.mutex);
  s.cache->set_limit(usable_slots);
  s.header().usable_slots.store(s.cache->limit(), std::memory_order_relaxed);
  if (!s.blocked.empty()) s.retry_blocked();  // a raised limit frees room at once
  return ok();
}

void IoServer::stop() { impl_->stop(); }
const std::string& IoServer::segment_name() const { return impl_->segment_name; }
const std::string& IoServer::trunk_segment_name() const { return impl_->trunk_name; }
const std::string& IoServer::wake_segment_name() const { return impl_->wake_name; }
const std::filesystem::path& IoServer::shm_dir() const { return impl_->shm_dir; }
bool IoServer::direct_io_engaged() const { return impl_->reader->direct_io_engaged(); }

}  // namespace waste

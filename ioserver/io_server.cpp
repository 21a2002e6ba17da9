#include "ioserver/io_server.hpp"

#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <new>
#include <optional>
#include <thread>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include "ioserver/expert_cache/expert_cache.hpp"
#include "ioserver/nvme/reader_pool.hpp"
#include "shared/ipc/process_liveness.hpp"
#include "shared/ipc/segment_names.hpp"
#include "shared/ipc/shm_layout.hpp"
#include "shared/ipc/spsc_ring.hpp"

namespace waste {

namespace bip = boost::interprocess;
using namespace std::chrono_literals;

namespace {

constexpr auto kReclaimPeriod = 200ms;
constexpr auto kServiceSleep = 100ms;   // futex timeout: bounds heartbeat and reclaim latency
constexpr int kServiceSpin = 4000;      // polls before sleeping: keeps cached-hit latency low
constexpr int kDrainBatch = 64;         // requests taken from one client before looking at the next

// Remove a segment left behind by a dead daemon; refuse if its daemon still runs.
Status clear_stale_segment(const std::string& name, const std::string& trunk_name, const std::string& instance) {
  try {
    bip::shared_memory_object old(bip::open_only, name.c_str(), bip::read_only);
    bip::mapped_region region(old, bip::read_only);
    if (region.get_size() >= sizeof(ipc::ControlHeaderShm)) {
      const auto* h = static_cast<const ipc::ControlHeaderShm*>(region.get_address());
      if (h->magic == ipc::kArenaMagic && ipc::process_alive(h->daemon_pid, h->daemon_start_ticks)) {
        return make_error(Errc::ipc, "instance '" + instance + "' is already served by waste-ioserver pid " +
                                         std::to_string(h->daemon_pid));
      }
    }
  } catch (const bip::interprocess_exception&) {
    // Absent or unreadable: nothing to check.
  }
  bip::shared_memory_object::remove(name.c_str());
  bip::shared_memory_object::remove(trunk_name.c_str());
  return ok();
}

}  // namespace

struct IoServer::Impl {
  struct Client {
    bool attached = false;
    int pid = 0;
    std::uint64_t start_ticks = 0;
    std::uint64_t generation = 0;
    std::vector<std::uint32_t> pinned;  // slots this client pinned (reserved to n_slots)
    std::optional<ipc::RingConsumer> requests;
    std::optional<ipc::RingProducer> completions;
  };

  IoServerConfig config;
  std::unique_ptr<RecordReader> reader;
  std::string segment_name;
  std::string trunk_name;
  bool trunk_created = false;
  bip::shared_memory_object shm;
  bip::mapped_region region;
  ipc::ArenaView view;

  mutable std::mutex mutex;  // guards everything below and every completion ring's producer side
  std::unique_ptr<ExpertCache> cache;
  std::vector<Client> clients;
  std::uint64_t hits = 0, misses = 0, bytes_read = 0, reads = 0, prefetch_reads = 0, read_errors = 0,
                reclaimed = 0, arena_waits = 0;
  // Demands that found every slot pinned or in flight, oldest first. Each still owes its client
  // exactly one completion: served when a slot frees up, or an arena_full error at the deadline.
  struct BlockedDemand {
    int client;
    int layer;
    int expert;
    std::chrono::steady_clock::time_point since;
  };
  std::deque<BlockedDemand> blocked;
  std::array<std::uint64_t, kLatencyBuckets> latency{};

  std::unique_ptr<ReaderPool> readers;
  std::thread service;
  std::thread populator;  // pre-faults the arena's slot pages in idle time (see populate_arena)
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> populated_bytes{0};
  std::atomic<std::uint32_t> slots_claimed{0};  // written under the mutex, read by the populator
  std::once_flag stop_once;

  ipc::ControlHeaderShm& header() const { return view.header(); }

  // ---- request handling (mutex held) ---------------------------------------------------------
  bool key_valid(int layer, int expert) const {
    return layer >= 0 && layer < reader->n_layers() && reader->has_layer(layer) && expert >= 0 &&
           expert < reader->n_experts();
  }

  void push_completion(int c, const ipc::Completion& completion) {
    Client& client = clients[std::size_t(c)];
    if (!client.attached) return;
    if (!client.completions->try_push(ipc::encode_completion(completion))) {
      // Only a client with > kRingCapacity outstanding demands can get here (a protocol breach).
      std::fprintf(stderr, "waste-ioserver: completion ring of client %d full, dropping expert %d of layer %d\n", c,
                   completion.expert, completion.layer);
      return;
    }
    client.completions->notify();
  }

  void push_error(int c, int layer, int expert, ipc::CompletionError code, const std::string& text) {
    if (!clients[std::size_t(c)].attached) return;
    ipc::write_error_text(view.client(c), text);
    push_completion(c, ipc::Completion{layer, expert, true, true, std::uint32_t(code)});
  }

  // Serve one demand. False when every slot is pinned, waited on or in flight: the caller
  // queues it (or fails it) and nothing else changed.
  bool try_demand(int c, int layer, int expert) {
    Client& client = clients[std::size_t(c)];
    ipc::ClientShm& shm_client = view.client(c);
    const auto lookup = cache->demand(ipc::make_key(layer, expert));
    if (lookup.outcome == ExpertCache::Outcome::no_victim) return false;
    cache->pin(lookup.slot, c);
    client.pinned.push_back(lookup.slot);
    if (lookup.outcome == ExpertCache::Outcome::ready) {
      ++hits;
      shm_client.hits.fetch_add(1, std::memory_order_relaxed);
      push_completion(c, ipc::Completion{layer, expert, false, false, lookup.slot});
      return true;
    }
    ++misses;
    shm_client.misses.fetch_add(1, std::memory_order_relaxed);
    cache->add_waiter(lookup.slot, c);
    if (lookup.outcome == ExpertCache::Outcome::claimed) {
      note_claimed(lookup.slot);
      readers->submit(ReaderPool::Job{lookup.slot, layer, expert, c, client.generation, false});
    }
    return true;
  }

  // Why no slot can be had, with the counts a user needs to size the arena.
  std::string arena_full_text(int c, int layer, int expert, const std::string& why) const {
    std::uint32_t pinned = 0, mine = 0, inflight = 0;
    for (std::uint32_t s = 0; s < cache->n_slots(); ++s) {
      const std::uint64_t mask = view.slot(s).pin_mask.load(std::memory_order_relaxed);
      if (mask != 0) ++pinned;
      if (mask & (std::uint64_t{1} << c)) ++mine;
      if (mask == 0 && cache->state(s) == ipc::SlotState::inflight) ++inflight;
    }
    return "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) + ": " + why + " (arena " +
           std::to_string(cache->n_slots()) + " slots: " + std::to_string(pinned) + " pinned, " +
           std::to_string(mine) + " of them by this client, " + std::to_string(inflight) + " being read)";
  }

  void handle_demand(int c, int layer, int expert) {
    if (!key_valid(layer, expert)) {
      push_error(c, layer, expert, ipc::CompletionError::bad_key,
                 "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                     ": no such record in this container");
      return;
    }
    // Behind demands already waiting, only a resident record is served at once (first come,
    // first served for the slots that free up).
    const bool resident = cache->find(ipc::make_key(layer, expert)).has_value();
    if ((resident || blocked.empty()) && try_demand(c, layer, expert)) return;
    // Pins are released only by release-layer, which a client sends after its demands are
    // answered: when this client pins every slot itself, waiting can never help.
    if (clients[std::size_t(c)].pinned.size() >= cache->n_slots()) {
      push_error(c, layer, expert, ipc::CompletionError::arena_full,
                 arena_full_text(c, layer, expert, "this client pins every arena slot itself, so none can be freed"));
      return;
    }
    ++arena_waits;
    blocked.push_back(BlockedDemand{c, layer, expert, std::chrono::steady_clock::now()});
  }

  // Something may have become evictable (a release, a detach, a reclaim, a landed read): serve
  // the waiting demands in arrival order. A record another client brought in meanwhile is a hit
  // and needs no slot; once one claim fails, later claims would too, so only hits go on.
  void retry_blocked() {
    bool room = true;
    for (auto it = blocked.begin(); it != blocked.end();) {
      const bool resident = cache->find(ipc::make_key(it->layer, it->expert)).has_value();
      if ((resident || room) && try_demand(it->client, it->layer, it->expert)) {
        it = blocked.erase(it);
        continue;
      }
      if (!resident) room = false;
      ++it;
    }
  }

  // Fail the demands that waited longer than config.arena_wait.
  void expire_blocked(std::chrono::steady_clock::time_point now) {
    for (auto it = blocked.begin(); it != blocked.end();) {
      if (now - it->since < config.arena_wait) {
        ++it;
        continue;
      }
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - it->since).count();
      push_error(it->client, it->layer, it->expert, ipc::CompletionError::arena_full,
                 arena_full_text(it->client, it->layer, it->expert,
                                 "no arena slot was freed within " + std::to_string(waited) + " ms"));
      it = blocked.erase(it);
    }
  }

  void drop_blocked(int c, std::optional<int> layer = std::nullopt) {
    std::erase_if(blocked, [&](const BlockedDemand& b) { return b.client == c && (!layer || b.layer == *layer); });
  }

  void handle_prefetch(int c, int layer, int expert) {
    if (!key_valid(layer, expert)) return;  // speculative: dropped silently
    const auto lookup = cache->prefetch(ipc::make_key(layer, expert));
    if (lookup.outcome == ExpertCache::Outcome::claimed) {
      note_claimed(lookup.slot);
      readers->submit(ReaderPool::Job{lookup.slot, layer, expert, c, clients[std::size_t(c)].generation, true});
    }
  }

  void handle_release(int c, int layer) {
    drop_blocked(c, layer);  // a client that releases the layer no longer wants its demands
    auto& pinned = clients[std::size_t(c)].pinned;
    for (std::size_t i = 0; i < pinned.size();) {
      const std::uint32_t slot = pinned[i];
      if (ipc::key_layer(cache->key(slot)) == layer) {
        cache->drop_waiter(slot, c);
        cache->unpin(slot, c);
        pinned[i] = pinned.back();
        pinned.pop_back();
      } else {
        ++i;
      }
    }
  }

  // Take up to kDrainBatch requests from every client. True when any was handled.
  bool drain() {
    std::lock_guard lock(mutex);
    bool worked = false;
    for (std::size_t c = 0; c < clients.size(); ++c) {
      if (!clients[c].attached) continue;
      for (int n = 0; n < kDrainBatch; ++n) {
        const auto entry = clients[c].requests->try_pop();
        if (!entry) break;
        worked = true;
        const ipc::RingRequest r = ipc::decode_request(*entry);
        switch (r.kind) {
          case ipc::RequestKind::demand: handle_demand(int(c), r.layer, r.expert); break;
          case ipc::RequestKind::prefetch: handle_prefetch(int(c), r.layer, r.expert); break;
          case ipc::RequestKind::release_layer: handle_release(int(c), r.layer); break;
          default: break;  // unknown kind from a newer or broken client: ignored
        }
      }
    }
    if (worked && !blocked.empty()) retry_blocked();
    return worked;
  }

  bool any_request_pending() const {
    for (int c = 0; c < config.max_clients; ++c) {
      // Relaxed state read: a false "attached" only delays work by one sleep (the rings are reset
      // at attach, before the lease is handed out).
      if (view.client(c).state.load(std::memory_order_acquire) != std::uint32_t(ipc::ClientState::attached)) continue;
      const ipc::RingShm& ring = view.request_ring(c);
      if (ring.tail.load(std::memory_order_acquire) != ring.head.load(std::memory_order_relaxed)) return true;
    }
    return false;
  }

  // ---- read completion (reader thread) ------------------------------------------------------
  void on_read_done(const ReaderPool::Job& job, const Status& status, std::chrono::nanoseconds elapsed) {
    std::lock_guard lock(mutex);
    const std::uint64_t waiters = cache->take_waiters(job.slot);
    const bool requester_alive = job.client >= 0 && clients[std::size_t(job.client)].attached &&
                                 clients[std::size_t(job.client)].generation == job.generation;
    if (status) {
      ++reads;
      bytes_read += reader->record_bytes();
      if (job.prefetch) ++prefetch_reads;
      if (requester_alive) {
        view.client(job.client).bytes_read.fetch_add(reader->record_bytes(), std::memory_order_relaxed);
        if (job.prefetch) view.client(job.client).prefetch_reads.fetch_add(1, std::memory_order_relaxed);
      }
      const auto us = std::uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count());
      const int bucket = us < 2 ? 0 : std::min(kLatencyBuckets - 1, int(std::bit_width(us)) - 1);
      ++latency[std::size_t(bucket)];
      cache->mark_ready(job.slot);
      for (std::uint64_t w = waiters; w != 0; w &= w - 1) {
        const int c = std::countr_zero(w);
        push_completion(c, ipc::Completion{job.layer, job.expert, false, true, job.slot});
      }
    } else {
      ++read_errors;
      std::fprintf(stderr, "waste-ioserver: %s\n", status.error().message.c_str());
      for (std::uint64_t w = waiters; w != 0; w &= w - 1) {
        push_error(std::countr_zero(w), job.layer, job.expert, ipc::CompletionError::read_failed,
                   status.error().message);
      }
      cache->mark_failed(job.slot);
    }
    if (!blocked.empty()) retry_blocked();  // the slot may now be evictable (or free, if it failed)
  }

  // ---- clients (mutex held) -----------------------------------------------------------------
  void free_client(int c) {
    Client& client = clients[std::size_t(c)];
    drop_blocked(c);
    for (std::uint32_t slot : client.pinned) cache->unpin(slot, c);
    client.pinned.clear();
    for (std::uint32_t s = 0; s < cache->n_slots(); ++s) {
      if (cache->waiters(s) & (std::uint64_t{1} << c)) cache->drop_waiter(s, c);
    }
    client.attached = false;
    client.requests.reset();
    client.completions.reset();
    view.client(c).state.store(std::uint32_t(ipc::ClientState::free), std::memory_order_release);
    view.client(c).pid.store(0, std::memory_order_relaxed);
  }

  void reclaim_dead_locked() {
    for (int c = 0; c < config.max_clients; ++c) {
      Client& client = clients[std::size_t(c)];
      if (client.attached && !ipc::process_alive(client.pid, client.start_ticks)) {
        std::fprintf(stderr, "waste-ioserver: client %d (pid %d) died; freeing its %zu pins\n", c, client.pid,
                     client.pinned.size());
        free_client(c);
        ++reclaimed;
      }
    }
    if (!blocked.empty()) retry_blocked();  // the dead client's pins are free now
  }

  void service_loop() {
    auto next_reclaim = std::chrono::steady_clock::now() + kReclaimPeriod;
    while (!stopping.load(std::memory_order_acquire)) {
      const bool worked = drain();
      header().heartbeat.fetch_add(1, std::memory_order_relaxed);
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_reclaim) {
        std::lock_guard lock(mutex);
        reclaim_dead_locked();
        next_reclaim = now + kReclaimPeriod;
      }
      {
        std::lock_guard lock(mutex);
        if (!blocked.empty()) expire_blocked(now);
      }
      if (!worked) {
        ipc::wait_doorbell(
            header().work,
            [this] { return stopping.load(std::memory_order_relaxed) || any_request_pending(); },
            kServiceSpin, std::chrono::duration_cast<std::chrono::microseconds>(kServiceSleep));
      }
    }
  }

  // A fresh shared-memory page costs the first writer an allocation, a zero fill and a page-cache
  // insert (~0.85 s per GB measured on the 2-core VM): left to the readers, every miss into a
  // never-used slot paid it on the critical path (docs/LEARNED.md). This thread faults slot pages
  // in ahead of the reads, at SCHED_IDLE so it only uses idle CPU. The free list hands slots out
  // in index order, so it keeps the pages from the highest claimed slot to kPopulateAhead bytes
  // beyond it populated: RSS follows use instead of jumping to the whole arena at start.
  // MADV_POPULATE_WRITE never changes the bytes, so racing a reader on the same slot is harmless.
  static constexpr std::uint64_t kPopulateAhead = std::uint64_t{256} << 20;
  void populate_arena() {
    sched_param param{};
    ::sched_setscheduler(0, SCHED_IDLE, &param);  // this thread only; failure just means normal priority
    constexpr std::uint64_t kChunk = std::uint64_t{32} << 20;
    std::byte* const begin = view.slot_data(0);
    const std::uint64_t slot_bytes = header().slot_bytes;
    const std::uint64_t bytes = std::uint64_t(header().n_slots) * slot_bytes;
    std::uint64_t done = 0;
    while (done < bytes && !stopping.load(std::memory_order_relaxed)) {
      const std::uint64_t used = std::uint64_t(slots_claimed.load(std::memory_order_relaxed)) * slot_bytes;
      const std::uint64_t target = std::min(bytes, used + kPopulateAhead);
      if (done >= target) {
        std::this_thread::sleep_for(50ms);  // caught up: wait for the cache to claim more slots
        continue;
      }
      const std::uint64_t n = std::min(kChunk, target - done);
      if (::madvise(begin + done, n, MADV_POPULATE_WRITE) != 0) return;  // kernel < 5.14: readers fault as before
      done += n;
      populated_bytes.store(done, std::memory_order_relaxed);
    }
  }

  // The populator's guide: one past the highest slot index ever claimed for a read.
  void note_claimed(std::uint32_t slot) {
    if (slot + 1 > slots_claimed.load(std::memory_order_relaxed)) slots_claimed.store(slot + 1, std::memory_order_relaxed);
  }

  void stop() {
    std::call_once(stop_once, [this] {
      stopping.store(true, std::memory_order_release);
      // Wake the service thread whether or not it counts as a sleeper.
      header().work.word.fetch_add(1, std::memory_order_release);
      ipc::futex_wake_shared(header().work.word);
      if (service.joinable()) service.join();
      if (populator.joinable()) populator.join();
      if (readers) readers->stop();
      // SYNC POINT: release pairs with the clients' acquire load of shutting_down in their waits.
      header().shutting_down.store(1, std::memory_order_release);
      for (int c = 0; c < config.max_clients; ++c) ipc::ring_doorbell(view.completion_ring(c).bell);
    });
  }
};

IoServer::IoServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

IoServer::~IoServer() {
  if (!impl_) return;
  impl_->stop();
  bip::shared_memory_object::remove(impl_->segment_name.c_str());
  if (impl_->trunk_created) bip::shared_memory_object::remove(impl_->trunk_name.c_str());
}

Result<std::unique_ptr<IoServer>> IoServer::create(const IoServerConfig& config, std::unique_ptr<RecordReader> reader) {
  Parts parts;
  parts.reader = std::move(reader);
  return create(config, std::move(parts));
}

Result<std::unique_ptr<IoServer>> IoServer::create(const IoServerConfig& config, Parts parts) {
  WASTE_TRY(ipc::validate_instance_name(config.instance));
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

  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->reader = std::move(parts.reader);
  impl->segment_name = ipc::arena_segment_name(config.instance);
  const std::string trunk_name = ipc::trunk_segment_name(config.instance);
  WASTE_TRY(clear_stale_segment(impl->segment_name, trunk_name, config.instance));

  const auto n_slots = std::uint32_t(config.arena_slots);
  const auto max_clients = std::uint32_t(config.max_clients);
  const std::uint64_t record_bytes = impl->reader->record_bytes();
  const auto layout = ipc::ArenaLayout::compute(record_bytes, n_slots, max_clients);
  bip::permissions owner_only;
  owner_only.set_permissions(0600);
  try {
    impl->shm = bip::shared_memory_object(bip::create_only, impl->segment_name.c_str(), bip::read_write, owner_only);
    impl->shm.truncate(bip::offset_t(layout.total_bytes));
    impl->region = bip::mapped_region(impl->shm, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    bip::shared_memory_object::remove(impl->segment_name.c_str());
    return make_error(Errc::io, "shared memory segment " + impl->segment_name + " (" +
                                    std::to_string(layout.total_bytes) + " bytes): " + e.what());
  }
  auto* base = static_cast<std::byte*>(impl->region.get_address());
  // The segment arrives zero-filled; construct the objects formally before anyone uses them.
  auto* header = new (base) ipc::ControlHeaderShm{};
  header->layout_version = ipc::kLayoutVersion;
  header->header_bytes = sizeof(ipc::ControlHeaderShm);
  header->total_bytes = layout.total_bytes;
  std::error_code ec;
  const auto canonical = std::filesystem::weakly_canonical(config.container, ec);
  header->container_path_hash = ipc::fnv1a64((ec ? config.container : canonical).string());
  header->manifest_bytes = parts.manifest_bytes;
  header->manifest_mtime_ns = parts.manifest_mtime_ns;
  header->record_bytes = record_bytes;
  header->slot_bytes = layout.slot_bytes;
  header->n_slots = n_slots;
  header->max_clients = max_clients;
  header->n_layers = std::uint32_t(impl->reader->n_layers());
  header->n_experts = std::uint32_t(impl->reader->n_experts());
  header->slots_offset = layout.slots_offset;
  header->clients_offset = layout.clients_offset;
  header->rings_offset = layout.rings_offset;
  header->arena_offset = layout.arena_offset;
  header->trunk_bytes = parts.trunk_bytes;
  header->daemon_pid = int(::getpid());
  header->direct_io = impl->reader->direct_io_engaged() ? 1 : 0;
  header->daemon_start_ticks = ipc::process_start_ticks(::getpid()).value_or(0);
  impl->view = ipc::ArenaView(base);
  auto* slots = reinterpret_cast<ipc::SlotShm*>(base + layout.slots_offset);
  for (std::uint32_t i = 0; i < n_slots; ++i) new (&slots[i]) ipc::SlotShm{};
  for (std::uint32_t c = 0; c < max_clients; ++c) {
    new (&impl->view.client(int(c))) ipc::ClientShm{};
    new (&impl->view.request_ring(int(c))) ipc::RingShm{};
    new (&impl->view.completion_ring(int(c))) ipc::RingShm{};
  }
  // Magic last: a reader that validates the magic sees a fully initialised header.
  std::atomic_ref<std::uint64_t>(header->magic).store(ipc::kArenaMagic, std::memory_order_release);

  if (parts.trunk_bytes > 0) {
    try {
      bip::shared_memory_object trunk(bip::create_only, trunk_name.c_str(), bip::read_write, owner_only);
      impl->trunk_created = true;
      impl->trunk_name = trunk_name;
      trunk.truncate(bip::offset_t(parts.trunk_bytes));
      bip::mapped_region image(trunk, bip::read_write);
      WASTE_TRY(parts.trunk_fill(std::span<std::byte>(static_cast<std::byte*>(image.get_address()), parts.trunk_bytes)));
      // Read-only from now on, even for the owner: clients map it read_only.
      ::fchmod(trunk.get_mapping_handle().handle, 0400);
    } catch (const bip::interprocess_exception& e) {
      bip::shared_memory_object::remove(impl->segment_name.c_str());
      bip::shared_memory_object::remove(trunk_name.c_str());
      return make_error(Errc::io, "trunk segment " + trunk_name + ": " + e.what());
    }
  }

  impl->cache = std::make_unique<ExpertCache>(std::span<ipc::SlotShm>(slots, n_slots), config.policy);
  impl->clients.resize(max_clients);
  for (auto& c : impl->clients) c.pinned.reserve(n_slots);
  Impl* raw = impl.get();
  impl->readers = std::make_unique<ReaderPool>(
      *impl->reader, config.reader_threads, n_slots,
      [raw](std::uint32_t slot) { return std::span<std::byte>(raw->view.slot_data(slot), raw->header().record_bytes); },
      [raw](const ReaderPool::Job& job, const Status& status, std::chrono::nanoseconds elapsed) {
        raw->on_read_done(job, status, elapsed);
      });
  impl->service = std::thread([raw] { raw->service_loop(); });
  if (config.populate_arena) impl->populator = std::thread([raw] { raw->populate_arena(); });
  return std::unique_ptr<IoServer>(new IoServer(std::move(impl)));
}

Result<ClientLease> IoServer::attach(int pid) {
  Impl& s = *impl_;
  const auto start_ticks = ipc::process_start_ticks(pid);
  if (!start_ticks) return make_error(Errc::argument, "attach: no running process with pid " + std::to_string(pid));
  std::lock_guard lock(s.mutex);
  if (s.stopping.load(std::memory_order_relaxed)) return make_error(Errc::ipc, "attach: waste-ioserver is stopping");
  for (int c = 0; c < s.config.max_clients; ++c) {
    Impl::Client& client = s.clients[std::size_t(c)];
    if (client.attached) continue;
    ipc::ClientShm& shm_client = s.view.client(c);
    s.view.request_ring(c).reset();
    s.view.completion_ring(c).reset();
    ipc::write_error_text(shm_client, "");
    shm_client.hits.store(0, std::memory_order_relaxed);
    shm_client.misses.store(0, std::memory_order_relaxed);
    shm_client.bytes_read.store(0, std::memory_order_relaxed);
    shm_client.prefetch_reads.store(0, std::memory_order_relaxed);
    client.attached = true;
    client.pid = pid;
    client.start_ticks = *start_ticks;
    client.generation = shm_client.generation.load(std::memory_order_relaxed) + 1;
    client.pinned.clear();
    client.requests.emplace(s.view.request_ring(c));
    client.completions.emplace(s.view.completion_ring(c));
    shm_client.generation.store(client.generation, std::memory_order_relaxed);
    shm_client.pid.store(pid, std::memory_order_relaxed);
    // SYNC POINT: release publishes the reset rings; pairs with the acquire in any_request_pending
    // and with the client's acquire when it validates its lease.
    shm_client.state.store(std::uint32_t(ipc::ClientState::attached), std::memory_order_release);
    ClientLease lease;
    lease.client_idx = c;
    lease.generation = client.generation;
    lease.segment_name = s.segment_name;
    lease.trunk_segment_name = s.trunk_name;
    lease.trunk_bytes = s.header().trunk_bytes;
    lease.daemon_pid = s.header().daemon_pid;
    return lease;
  }
  return make_error(Errc::ipc, "attach: all " + std::to_string(s.config.max_clients) + " client slots are in use");
}

Status IoServer::detach(int client_idx) {
  Impl& s = *impl_;
  std::lock_guard lock(s.mutex);
  if (client_idx < 0 || client_idx >= s.config.max_clients || !s.clients[std::size_t(client_idx)].attached) {
    return make_error(Errc::argument, "detach: client " + std::to_string(client_idx) + " is not attached");
  }
  s.free_client(client_idx);
  if (!s.blocked.empty()) s.retry_blocked();
  return ok();
}

void IoServer::reclaim_dead_clients() {
  std::lock_guard lock(impl_->mutex);
  impl_->reclaim_dead_locked();
}

IoStats IoServer::stats() const {
  const Impl& s = *impl_;
  IoStats st;
  st.read_queue_depth = std::uint32_t(s.readers->depth());
  std::lock_guard lock(s.mutex);
  st.hits = s.hits;
  st.misses = s.misses;
  st.bytes_read = s.bytes_read;
  st.reads = s.reads;
  st.prefetch_reads = s.prefetch_reads;
  st.read_errors = s.read_errors;
  st.evictions = s.cache->evictions();
  st.clients_reclaimed = s.reclaimed;
  st.arena_waits = s.arena_waits;
  st.arena_populated_bytes = s.populated_bytes.load(std::memory_order_relaxed);
  st.demands_waiting = std::uint32_t(s.blocked.size());
  st.read_latency_us_log2 = s.latency;
  st.direct_io = s.reader->direct_io_engaged();
  st.io_uring = s.reader->io_uring_engaged();
  st.slots_total = s.cache->n_slots();
  st.slots_used = s.cache->used();
  st.record_bytes = s.reader->record_bytes();
  st.policy = s.cache->policy();
  for (std::uint32_t i = 0; i < s.cache->n_slots(); ++i) {
    if (s.view.slot(i).pin_mask.load(std::memory_order_relaxed) != 0) ++st.slots_pinned;
  }
  for (int c = 0; c < s.config.max_clients; ++c) {
    const Impl::Client& client = s.clients[std::size_t(c)];
    if (!client.attached) continue;
    const ipc::ClientShm& shm_client = s.view.client(c);
    ClientIoStats cs;
    cs.client_idx = c;
    cs.pid = client.pid;
    cs.hits = shm_client.hits.load(std::memory_order_relaxed);
    cs.misses = shm_client.misses.load(std::memory_order_relaxed);
    cs.bytes_read = shm_client.bytes_read.load(std::memory_order_relaxed);
    cs.prefetch_reads = shm_client.prefetch_reads.load(std::memory_order_relaxed);
    std::uint32_t pinned = 0;
    for (std::uint32_t i = 0; i < s.cache->n_slots(); ++i) {
      if (s.view.slot(i).pin_mask.load(std::memory_order_relaxed) & (std::uint64_t{1} << c)) ++pinned;
    }
    cs.pinned_slots = pinned;
    const ipc::RingShm& ring = s.view.request_ring(c);
    cs.request_queue_depth = std::uint32_t(ring.tail.load(std::memory_order_acquire) -
                                           ring.head.load(std::memory_order_acquire));
    st.clients.push_back(cs);
  }
  return st;
}

Status IoServer::set_policy(CachePolicy policy) {
  std::lock_guard lock(impl_->mutex);
  impl_->cache->set_policy(policy);
  return ok();
}

void IoServer::stop() { impl_->stop(); }
const std::string& IoServer::segment_name() const { return impl_->segment_name; }
const std::string& IoServer::trunk_segment_name() const { return impl_->trunk_name; }
bool IoServer::direct_io_engaged() const { return impl_->reader->direct_io_engaged(); }

}  // namespace waste

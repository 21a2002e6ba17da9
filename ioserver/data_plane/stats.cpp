// IoServer's statistics: totals, per-client counters and the cache's occupancy, and their JSON
// form (the daemon's `stats` reply, which waste-ctl prints): built here only.
#include <nlohmann/json.hpp>

#include <algorithm>

#include "ioserver/data_plane/io_server_impl.hpp"

namespace waste {

IoStats IoServer::stats() const {
  const Impl& s = *impl_;
  IoStats st;
  st.read_queue_depth = std::uint32_t(s.readers->depth());
  if (s.engram_readers) st.engram_queue_depth = std::uint32_t(s.engram_readers->depth());
  std::lock_guard lock(s.mutex);
  st.hits = s.hits;
  st.misses = s.misses;
  st.bytes_read = s.bytes_read;
  st.reads = s.reads;
  st.prefetch_reads = s.prefetch_reads;
  st.read_errors = s.read_errors;
  st.evictions = s.cache->evictions();
  st.clients_reclaimed = s.reclaimed;
  st.breaches = s.breaches;
  st.usable_slots = s.cache->limit();
  st.arena_waits = s.arena_waits;
  st.arena_populated_bytes = s.populated_bytes.load(std::memory_order_relaxed);
  st.demands_waiting = std::uint32_t(s.blocked.size());
  st.fill_records = s.fill_records;
  st.fill_bytes = s.fill_bytes;
  st.fill_total = s.fill_total;
  st.fill_state = s.fill_state();
  st.read_latency_us_log2 = s.latency;
  st.direct_io = s.reader->direct_io_engaged();
  st.io_uring = s.reader->io_uring_engaged();
  st.slots_total = s.cache->n_slots();
  st.slots_used = s.cache->used();
  st.record_bytes = s.layout.record_bytes;
  st.policy = s.cache->policy();
  for (std::uint32_t i = 0; i < s.cache->n_slots(); ++i) {
    if (s.view.slot(i).pin_mask.load(std::memory_order_relaxed) != 0) ++st.slots_pinned;
  }
  if (s.engram_pool) {
    st.engram_pool_pages = s.engram_pool->n_slots();
    st.engram_pool_used = s.engram_pool->used();
    st.engram_pool_pinned = s.engram_pool->pinned();
    st.engram_evictions = s.engram_pool->evictions();
    st.engram_direct_io = s.engram_reader->direct_io_engaged();
    for (std::size_t t = 0; t < s.engram_counts.size(); ++t) {
      const auto& file = s.engram_reader->tables()[t];
      const auto& n = s.engram_counts[t];
      st.engram.push_back(EngramTableStats{file.header.layer, file.header.rows, file.pages, n.hits, n.misses,
                                           n.bytes_read, n.reads, n.prefetch_reads, n.read_errors});
    }
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
    cs.pin_entries = std::uint32_t(client.pinned.size());
    cs.demands_waiting = std::uint32_t(
        std::count_if(s.blocked.begin(), s.blocked.end(), [c](const auto& b) { return b.client == c; }));
    // The tail is client-written: report the depth, clamped, never trust it for anything else.
    const ipc::RingShm& ring = client.ring_shm().request;
    const std::uint64_t depth = ring.tail.load(std::memory_order_acquire) - client.requests->head();
    cs.request_queue_depth = std::uint32_t(std::min<std::uint64_t>(depth, ipc::kRingCapacity));
    st.clients.push_back(cs);
  }
  return st;
}

nlohmann::json stats_json(const IoStats& s) {
  using nlohmann::json;
  json latency = json::array();
  for (auto v : s.read_latency_us_log2) latency.push_back(v);
  json totals = {{"hits", s.hits},
                 {"misses", s.misses},
                 {"bytes_read", s.bytes_read},
                 {"reads", s.reads},
                 {"prefetch_reads", s.prefetch_reads},
                 {"read_errors", s.read_errors},
                 {"evictions", s.evictions},
                 {"clients_reclaimed", s.clients_reclaimed},
                 {"breaches", s.breaches},
                 {"usable_slots", s.usable_slots},
                 {"arena_waits", s.arena_waits},
                 {"demands_waiting", s.demands_waiting},
                 {"arena_populated_bytes", s.arena_populated_bytes},
                 {"fill", s.fill_state},
                 {"fill_records", s.fill_records},
                 {"fill_bytes", s.fill_bytes},
                 {"fill_total", s.fill_total},
                 {"read_latency_us_log2", latency},
                 {"queue_depth", s.read_queue_depth},
                 {"direct_io", s.direct_io},
                 {"io_uring", s.io_uring},
                 {"slots_total", s.slots_total},
                 {"slots_used", s.slots_used},
                 {"slots_pinned", s.slots_pinned},
                 {"record_bytes", s.record_bytes},
                 {"policy", cache_policy_name(s.policy)}};
  json clients = json::array();
  for (const auto& c : s.clients) {
    clients.push_back(json{{"client_idx", c.client_idx},
                           {"pid", c.pid},
                           {"hits", c.hits},
                           {"misses", c.misses},
                           {"bytes_read", c.bytes_read},
                           {"prefetch_reads", c.prefetch_reads},
                           {"pinned_slots", c.pinned_slots},
                           {"queue_depth", c.request_queue_depth}});
  }
  json tables = json::array();
  for (const auto& t : s.engram) {
    tables.push_back(json{{"layer", t.layer},
                          {"rows", t.rows},
                          {"pages", t.pages},
                          {"hits", t.hits},
                          {"misses", t.misses},
                          {"bytes_read", t.bytes_read},
                          {"reads", t.reads},
                          {"prefetch_reads", t.prefetch_reads},
                          {"read_errors", t.read_errors}});
  }
  json engram = {{"pool_pages", s.engram_pool_pages},
                 {"pool_used", s.engram_pool_used},
                 {"pool_pinned", s.engram_pool_pinned},
                 {"evictions", s.engram_evictions},
                 {"queue_depth", s.engram_queue_depth},
                 {"direct_io", s.engram_direct_io},
                 {"tables", tables}};
  return json{{"totals", totals}, {"clients", clients}, {"engram", engram}};
}

}  // namespace waste

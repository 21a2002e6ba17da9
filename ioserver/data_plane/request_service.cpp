// IoServer's request service: the service thread drains every client's request ring (each index
// and entry checked), serves demands (hit, read, or wait for a slot), prefetches and
// release-layers, and answers demands when reads land.
#include <algorithm>
#include <bit>
#include <cstdio>

#include "ioserver/data_plane/io_server_impl.hpp"

namespace waste {

namespace {

std::string record_name(int layer, int expert) {
  return "expert " + std::to_string(expert) + " of layer " + std::to_string(layer);
}

}  // namespace

bool IoServer::Impl::key_valid(int layer, int expert) const {
  return layer >= 0 && layer < n_layers && reader->has_layer(layer) && expert >= 0 && expert < n_experts;
}

void IoServer::Impl::push_completion(int c, const ipc::Completion& completion) {
  Client& client = clients[std::size_t(c)];
  if (!client.attached || client.breached) return;
  switch (client.completions->try_push_checked(ipc::encode_completion(completion))) {
    case ipc::RingProducer::Push::pushed: client.completions->notify(); return;
    // An honest client has at most kRingCapacity - 1 demands outstanding, so its completion ring
    // can never fill; a head ahead of our tail is a scribble.
    case ipc::RingProducer::Push::full:
      breach(c, "completion ring full (more than " + std::to_string(ipc::kRingCapacity - 1) +
                    " demands outstanding) when answering " + record_name(completion.layer, completion.expert));
      return;
    case ipc::RingProducer::Push::breach:
      breach(c, "completion ring head " +
                    std::to_string(client.ring_shm().completion.head.load(std::memory_order_relaxed)) +
                    " is ahead of the daemon's tail");
      return;
  }
}

void IoServer::Impl::push_error(int c, int layer, int expert, ipc::CompletionError code, const std::string& text) {
  if (!clients[std::size_t(c)].attached || clients[std::size_t(c)].breached) return;
  // Every error names the record, whatever the reader said.
  const std::string name = record_name(layer, expert);
  ipc::write_error_text(view.client(c), text.starts_with(name) ? text : name + ": " + text);
  push_completion(c, ipc::Completion{layer, expert, true, true, std::uint32_t(code)});
}

bool IoServer::Impl::try_demand(int c, int layer, int expert) {
  Client& client = clients[std::size_t(c)];
  ipc::ClientShm& shm_client = view.client(c);
  const auto lookup = cache->demand(ipc::make_key(layer, expert), c);
  if (lookup.outcome == ExpertCache::Outcome::no_victim) return false;
  // One entry per slot: a client repeating a demand it already holds (an honest one never does
  // before its release-layer) pins nothing new, so the list stays within n_slots.
  if (!cache->pinned_by(lookup.slot, c)) client.pinned.push_back(lookup.slot);
  cache->pin(lookup.slot, c);
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

std::string IoServer::Impl::arena_full_text(int c, int layer, int expert, const std::string& why) const {
  std::uint32_t pinned = 0, mine = 0, inflight = 0;
  for (std::uint32_t s = 0; s < cache->n_slots(); ++s) {
    const std::uint64_t mask = view.slot(s).pin_mask.load(std::memory_order_relaxed);
    if (mask != 0) ++pinned;
    if (mask & (std::uint64_t{1} << c)) ++mine;
    if (mask == 0 && cache->state(s) == ipc::SlotState::inflight) ++inflight;
  }
  std::string arena = "arena " + std::to_string(cache->n_slots()) + " slots";
  if (cache->limit() < cache->n_slots()) arena += ", " + std::to_string(cache->limit()) + " usable";
  return record_name(layer, expert) + ": " + why + " (" + arena + ": " + std::to_string(pinned) + " pinned, " +
         std::to_string(mine) + " of them by this client, " + std::to_string(inflight) + " being read)";
}

void IoServer::Impl::handle_demand(int c, int layer, int expert) {
  if (!key_valid(layer, expert)) {
    push_error(c, layer, expert, ipc::CompletionError::bad_key, "no such record in this container");
    return;
  }
  // Behind demands already waiting, only a resident record is served at once (first come,
  // first served for the slots that free up).
  const bool resident = cache->find(ipc::make_key(layer, expert)).has_value();
  if ((resident || blocked.empty()) && try_demand(c, layer, expert)) return;
  // Pins are released only by release-layer, which a client sends after its demands are
  // answered: when this client pins every usable slot itself, waiting can never help.
  if (clients[std::size_t(c)].pinned.size() >= cache->limit()) {
    push_error(c, layer, expert, ipc::CompletionError::arena_full,
               arena_full_text(c, layer, expert, "this client pins every arena slot itself, so none can be freed"));
    return;
  }
  // An honest client has at most kRingCapacity - 1 demands outstanding; more waiting here is a
  // client repeating demands without reading its answers, and the queue must not grow with it.
  const auto waiting = std::count_if(blocked.begin(), blocked.end(), [c](const BlockedDemand& b) { return b.client == c; });
  if (waiting >= std::ptrdiff_t(ipc::kRingCapacity - 1)) {
    breach(c, "more than " + std::to_string(ipc::kRingCapacity - 1) + " demands waiting for an arena slot (" +
                  record_name(layer, expert) + " again)");
    return;   // its waiting demands go with it (settle_breaches)
  }
  ++arena_waits;
  blocked.push_back(BlockedDemand{c, layer, expert, std::chrono::steady_clock::now()});
}

// Something may have become evictable (a release, a detach, a reclaim, a landed read): serve
// the waiting demands in arrival order. A record another client brought in meanwhile is a hit
// and needs no slot; once one claim fails, later claims would too, so only hits go on.
void IoServer::Impl::retry_blocked() {
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

void IoServer::Impl::expire_blocked(std::chrono::steady_clock::time_point now) {
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

void IoServer::Impl::drop_blocked(int c, std::optional<int> layer) {
  std::erase_if(blocked, [&](const BlockedDemand& b) { return b.client == c && (!layer || b.layer == *layer); });
}

void IoServer::Impl::handle_prefetch(int c, int layer, int expert) {
  if (!key_valid(layer, expert)) return;  // speculative: dropped silently
  const auto lookup = cache->prefetch(ipc::make_key(layer, expert), c);
  if (lookup.outcome == ExpertCache::Outcome::claimed) {
    note_claimed(lookup.slot);
    readers->submit(ReaderPool::Job{lookup.slot, layer, expert, c, clients[std::size_t(c)].generation, true});
  }
}

void IoServer::Impl::handle_release(int c, int layer) {
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

// Take up to kDrainBatch requests from every client. True when any was handled. Each ring index
// and entry is checked; a client that breaks the protocol is detached and the others go on.
bool IoServer::Impl::drain() {
  std::lock_guard lock(mutex);
  retired.clear();  // this thread is the only reader of request_ring_of: nothing points there now
  bool worked = false;
  for (std::size_t c = 0; c < clients.size(); ++c) {
    for (int n = 0; n < kDrainBatch && clients[c].attached && !clients[c].breached; ++n) {
      const auto popped = clients[c].requests->try_pop_checked();
      if (popped.status == ipc::RingConsumer::Pop::empty) break;
      worked = true;
      if (popped.status == ipc::RingConsumer::Pop::breach) {
        breach(int(c), "request ring tail " + std::to_string(popped.tail) + " against head " +
                           std::to_string(clients[c].requests->head()) + " (capacity " +
                           std::to_string(ipc::kRingCapacity) + ")");
        break;
      }
      const auto check = ipc::check_request(popped.entry, n_layers, n_experts, int(engram_pages.size()),
                                            engram_pages.data());
      if (check != ipc::RequestCheck::ok) {
        char entry[32];
        std::snprintf(entry, sizeof entry, "0x%016llx", static_cast<unsigned long long>(popped.entry));
        breach(int(c), std::string("request entry ") + entry + ": " + ipc::request_check_text(check) + " (" +
                           std::to_string(n_layers) + " layers x " + std::to_string(n_experts) + " experts" +
                           (engram_pages.empty() ? std::string()
                                                 : ", " + std::to_string(engram_pages.size()) + " Engram tables") +
                           ")");
        break;
      }
      if (ipc::is_engram_kind(ipc::RequestKind(std::uint8_t(popped.entry >> 40)))) {
        const ipc::EngramRequest r = ipc::decode_engram_request(popped.entry);
        switch (r.kind) {
          case ipc::RequestKind::engram_demand: handle_engram_demand(int(c), r.table, r.page, r.tag); break;
          case ipc::RequestKind::engram_prefetch: handle_engram_prefetch(int(c), r.table, r.page); break;
          default: handle_engram_release(int(c)); break;
        }
        continue;
      }
      const ipc::RingRequest r = ipc::decode_request(popped.entry);
      switch (r.kind) {
        case ipc::RequestKind::demand: handle_demand(int(c), r.layer, r.expert); break;
        case ipc::RequestKind::prefetch: handle_prefetch(int(c), r.layer, r.expert); break;
        case ipc::RequestKind::release_layer: handle_release(int(c), r.layer); break;
        default: break;  // Engram kinds: handled above
      }
    }
  }
  if (worked) last_request = std::chrono::steady_clock::now();  // the fill waits for the clients to go quiet
  if (worked && !blocked.empty()) retry_blocked();
  settle_breaches();
  return worked;
}

// The service thread's wake-up condition, evaluated without the mutex: only ring indices are
// read, and a wrong answer (a scribbled tail) costs one drain that finds the breach, or one sleep.
bool IoServer::Impl::any_request_pending() const {
  for (int c = 0; c < config.max_clients; ++c) {
    // SYNC POINT: acquire pairs with the release store in attach, after the ring segment was built.
    const ipc::RingShm* ring = request_ring_of[std::size_t(c)].load(std::memory_order_acquire);
    if (ring == nullptr) continue;
    if (ring->tail.load(std::memory_order_acquire) != ring->head.load(std::memory_order_relaxed)) return true;
  }
  return false;
}

void IoServer::Impl::on_read_done(const ReaderPool::Job& job, const Status& status, std::chrono::nanoseconds elapsed) {
  std::lock_guard lock(mutex);
  const std::uint64_t waiters = cache->take_waiters(job.slot);
  const bool requester_alive = job.client >= 0 && clients[std::size_t(job.client)].attached &&
                               clients[std::size_t(job.client)].generation == job.generation;
  if (job.fill) fill_inflight = false;
  if (status && job.fill) {
    // Counted apart: reads, bytes_read and the latencies stay the clients' (demand and prefetch).
    ++fill_records;
    fill_bytes += layout.record_bytes;
    cache->mark_ready(job.slot);
    for (std::uint64_t w = waiters; w != 0; w &= w - 1) {  // demands that arrived while it was read
      push_completion(std::countr_zero(w), ipc::Completion{job.layer, job.expert, false, true, job.slot});
    }
    if (cache->in_use() > cache->limit()) cache->trim();  // the limit was lowered while it was read
  } else if (status) {
    ++reads;
    bytes_read += layout.record_bytes;
    if (job.prefetch) ++prefetch_reads;
    if (requester_alive) {
      view.client(job.client).bytes_read.fetch_add(layout.record_bytes, std::memory_order_relaxed);
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
    if (cache->in_use() > cache->limit()) cache->trim();  // a landed prefetch above a lowered limit
  } else {
    // Whatever the reader left in the slot (a short read, a failed copy) is never served: the
    // key leaves the index before the error goes out, so the next demand reads again.
    ++read_errors;
    cache->mark_failed(job.slot);
    const std::string name = record_name(job.layer, job.expert);
    const std::string& text = status.error().message;
    std::fprintf(stderr, "waste-ioserver: %s\n", (text.starts_with(name) ? text : name + ": " + text).c_str());
    for (std::uint64_t w = waiters; w != 0; w &= w - 1) {
      push_error(std::countr_zero(w), job.layer, job.expert, ipc::CompletionError::read_failed, text);
    }
  }
  if (!blocked.empty()) retry_blocked();  // the slot may now be evictable (or free, if it failed)
  settle_breaches();
  maybe_fill(1);  // this read is still counted by the pool: the next fill read goes when it is the only one
}

void IoServer::Impl::service_loop() {
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
      settle_breaches();
      if (fill_pending.load(std::memory_order_relaxed)) maybe_fill(0);
    }
    if (!worked) {
      // The doorbell lives in client-writable memory: a scribbled word or sleeper count only
      // makes this wait end early or run to its timeout.
      ipc::wait_doorbell(
          wake_shm->work, [this] { return stopping.load(std::memory_order_relaxed) || any_request_pending(); },
          kServiceSpin, std::chrono::duration_cast<std::chrono::microseconds>(kServiceSleep));
    }
  }
}

}  // namespace waste

// IoServer's clients: attach (a client block and a fresh ring segment per lease), detach by
// {index, pid, generation}, reclaim of verifiably dead processes, and detaching a client that
// broke the ring protocol.
#include <cstdio>

#include "ioserver/data_plane/io_server_impl.hpp"

namespace waste {

void IoServer::Impl::free_client(int c) {
  Client& client = clients[std::size_t(c)];
  drop_blocked(c);
  for (std::uint32_t slot : client.pinned) cache->unpin(slot, c);
  client.pinned.clear();
  if (engram_pool) handle_engram_release(c);  // its Engram pins and waits
  for (std::uint32_t s = 0; s < cache->n_slots(); ++s) {
    if (cache->waiters(s) & (std::uint64_t{1} << c)) cache->drop_waiter(s, c);
  }
  client.attached = false;
  client.breached = false;
  client.requests.reset();
  client.completions.reset();
  client.watch.reset();
  request_ring_of[std::size_t(c)].store(nullptr, std::memory_order_release);
  // The name goes now (a new lease can never meet this file); the mapping when the service
  // thread next drains (it may be reading the indices right now).
  if (client.rings) {
    client.rings->remove();
    retired.push_back(std::move(client.rings));
  }
  client.ring_name.clear();
  view.client(c).state.store(std::uint32_t(ipc::ClientState::free), std::memory_order_release);
  view.client(c).pid.store(0, std::memory_order_relaxed);
  if (!blocked.empty()) retry_blocked();  // its pins are free now
}

void IoServer::Impl::breach(int c, const std::string& why) {
  Client& client = clients[std::size_t(c)];
  if (!client.attached || client.breached) return;
  client.breached = true;
  ++breaches;
  view.client(c).breaches.fetch_add(1, std::memory_order_relaxed);
  const std::string text = "client " + std::to_string(c) + " (pid " + std::to_string(client.pid) + ", lease " +
                           std::to_string(client.generation) + ") broke the ring protocol: " + why + "; detached";
  // The client learns why from its block (it then sees the lease gone).
  ipc::write_error_text(view.client(c), text);
  const auto now = std::chrono::steady_clock::now();
  if (now - last_breach_log >= kBreachLogEvery) {
    if (breaches_unlogged > 0) {
      std::fprintf(stderr, "waste-ioserver: %llu more protocol breaches not logged\n",
                   static_cast<unsigned long long>(breaches_unlogged));
    }
    std::fprintf(stderr, "waste-ioserver: %s\n", text.c_str());
    last_breach_log = now;
    breaches_unlogged = 0;
  } else {
    ++breaches_unlogged;
  }
}

void IoServer::Impl::settle_breaches() {
  for (int c = 0; c < config.max_clients; ++c) {
    if (clients[std::size_t(c)].breached) free_client(c);
  }
}

void IoServer::Impl::reclaim_dead_locked() {
  for (int c = 0; c < config.max_clients; ++c) {
    Client& client = clients[std::size_t(c)];
    if (!client.attached || !client.watch || !client.watch->dead()) continue;
    std::fprintf(stderr, "waste-ioserver: client %d (pid %d) died; freeing its %zu pins\n", c, client.pid,
                 client.pinned.size());
    free_client(c);
    ++reclaimed;
  }
}

Result<ClientLease> IoServer::attach(int pid) {
  Impl& s = *impl_;
  auto watch = ipc::ProcessWatch::open(pid);
  if (!watch) return make_error(Errc::argument, "attach: no running process with pid " + std::to_string(pid));
  std::lock_guard lock(s.mutex);
  if (s.stopping.load(std::memory_order_relaxed)) return make_error(Errc::ipc, "attach: waste-ioserver is stopping");
  for (int c = 0; c < s.config.max_clients; ++c) {
    Impl::Client& client = s.clients[std::size_t(c)];
    if (client.attached) continue;
    ipc::ClientShm& shm_client = s.view.client(c);
    const std::uint64_t generation = shm_client.generation.load(std::memory_order_relaxed) + 1;
    std::string ring_name;
    auto rings = s.create_ring_segment(c, generation, ring_name);
    if (!rings) return std::unexpected(rings.error());
    ipc::write_error_text(shm_client, "");
    shm_client.hits.store(0, std::memory_order_relaxed);
    shm_client.misses.store(0, std::memory_order_relaxed);
    shm_client.bytes_read.store(0, std::memory_order_relaxed);
    shm_client.prefetch_reads.store(0, std::memory_order_relaxed);
    client.attached = true;
    client.pid = pid;
    client.watch = std::move(*watch);
    client.generation = generation;
    client.pinned.clear();
    client.engram_pinned.clear();
    client.rings = std::move(*rings);
    client.ring_name = ring_name;
    client.requests.emplace(client.ring_shm().request);
    client.completions.emplace(client.ring_shm().completion);
    shm_client.generation.store(generation, std::memory_order_relaxed);
    shm_client.pid.store(pid, std::memory_order_relaxed);
    // SYNC POINT: releases publish the initialised ring segment to the service thread's
    // any_request_pending and, through the client block, to the client validating its lease.
    s.request_ring_of[std::size_t(c)].store(&client.ring_shm().request, std::memory_order_release);
    shm_client.state.store(std::uint32_t(ipc::ClientState::attached), std::memory_order_release);

    ClientLease lease;
    lease.client_idx = c;
    lease.generation = generation;
    lease.pid = pid;
    lease.segment_name = s.segment_name;
    lease.ring_segment_name = ring_name;
    lease.wake_segment_name = s.wake_name;
    lease.trunk_segment_name = s.trunk_name;
    lease.shm_dir = s.config.private_memory ? std::string() : s.shm_dir.string();
    lease.trunk_bytes = s.header().trunk_bytes;
    lease.daemon_pid = s.header().daemon_pid;
    if (s.config.private_memory) {
      auto m = std::make_shared<ipc::PrivateMappings>();
      m->arena = s.arena->bytes();
      m->rings = client.rings->bytes();
      m->wake = s.wake->bytes();
      if (s.trunk) m->trunk = std::span<const std::byte>(s.trunk->data(), s.header().trunk_bytes);
      // The mappings outlive this lease's detach and the IoServer itself while the client holds them.
      struct Hold {
        std::shared_ptr<ipc::ShmSegment> arena, rings, wake, trunk;
      };
      m->keep_alive = std::make_shared<Hold>(Hold{s.arena, client.rings, s.wake, s.trunk});
      lease.mappings = std::move(m);
    }
    return lease;
  }
  return make_error(Errc::ipc, "attach: all " + std::to_string(s.config.max_clients) + " client slots are in use");
}

Status IoServer::detach(int client_idx, int pid, std::uint64_t generation) {
  Impl& s = *impl_;
  std::lock_guard lock(s.mutex);
  const std::string who = "detach of client " + std::to_string(client_idx) + " (pid " + std::to_string(pid) +
                          ", lease " + std::to_string(generation) + ")";
  if (client_idx < 0 || client_idx >= s.config.max_clients || !s.clients[std::size_t(client_idx)].attached) {
    return make_error(Errc::argument, who + " ignored: that client is not attached");
  }
  const Impl::Client& client = s.clients[std::size_t(client_idx)];
  if (client.pid != pid || client.generation != generation) {
    return make_error(Errc::argument, who + " ignored: the index is held by pid " + std::to_string(client.pid) +
                                          ", lease " + std::to_string(client.generation) + " (a stale detach)");
  }
  s.free_client(client_idx);
  return ok();
}

std::optional<IoServer::Occupant> IoServer::occupant(int client_idx) const {
  const Impl& s = *impl_;
  std::lock_guard lock(s.mutex);
  if (client_idx < 0 || client_idx >= s.config.max_clients) return std::nullopt;
  const Impl::Client& client = s.clients[std::size_t(client_idx)];
  if (!client.attached) return std::nullopt;
  return Occupant{client.pid, client.generation};
}

void IoServer::reclaim_dead_clients() {
  std::lock_guard lock(impl_->mutex);
  impl_->reclaim_dead_locked();
}

}  // namespace waste

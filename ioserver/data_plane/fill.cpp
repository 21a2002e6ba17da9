// IoServer's background fill: when the usable slots can hold every record of the container (the
// automatic budget's whole expert set, or any budget that large), the records nobody asked for
// are read into free slots, so a long-lived daemon reaches warm speed without a flag.
//
// Low priority by construction: a fill read is issued only when the clients have sent no request
// for IoServerConfig::fill_idle (500 ms; a decoding sequence asks every layer, so the fill never
// reads while one runs), no demand waits for a slot and the reader pool holds no other job, and
// at most one is in flight, so a demand arriving after a quiet spell waits behind that one read
// at most. (Measured before the idle rule, session 16: issued between the layers of a cold
// decode, fill reads of ~26 ms each on this VM's disk slowed it from 5.7-6.7 to 2.8-3.6 tok/s.)
// A fill never evicts (ExpertCache::claim_free takes free slots only) and stops when the cursor
// has passed every record, when the slots no longer hold them all (a lowered limit: it resumes if
// they do again), or at stop. Filled records are ordinary unpinned entries: a later demand is a hit.
// The next fill read is issued from the landing of the previous one (on_read_done), or from the
// service loop when the readers go idle.
#include "ioserver/data_plane/io_server_impl.hpp"

namespace waste {

void IoServer::Impl::maybe_fill(std::size_t own_reads) {
  if (!fill_pending.load(std::memory_order_relaxed) || fill_inflight || stopping.load(std::memory_order_relaxed)) return;
  if (fill_total > cache->limit() || !blocked.empty() || readers->depth() > own_reads) return;
  if (std::chrono::steady_clock::now() - last_request < config.fill_idle) return;  // clients active
  const std::uint64_t end = std::uint64_t(n_layers) * std::uint64_t(n_experts);
  while (fill_next < end) {
    const int layer = int(fill_next / std::uint64_t(n_experts));
    const int expert = int(fill_next % std::uint64_t(n_experts));
    if (!reader->has_layer(layer)) {
      fill_next = std::uint64_t(layer + 1) * std::uint64_t(n_experts);
      continue;
    }
    const std::uint32_t key = ipc::make_key(layer, expert);
    if (cache->find(key)) {
      ++fill_next;
      continue;
    }
    const auto slot = cache->claim_free(key);
    if (!slot) return;  // no free slot now (in flight or failed and pinned): try again later
    note_claimed(*slot);
    if (!readers->submit(ReaderPool::Job{*slot, layer, expert, -1, 0, false, true})) {
      cache->mark_failed(*slot);  // stopping: the slot goes back, nothing is read
      return;
    }
    fill_inflight = true;
    ++fill_next;
    return;
  }
  fill_pending.store(false, std::memory_order_relaxed);
}

const char* IoServer::Impl::fill_state() const {
  if (!config.fill) return "off";
  if (!fill_pending.load(std::memory_order_relaxed) && !fill_inflight) return "done";
  return fill_total > cache->limit() ? "waiting" : "filling";
}

}  // namespace waste

// IoServer's arena populator.
//
// A fresh shared-memory page costs the first writer an allocation, a zero fill and a page-cache
// insert (~0.85 s per GB measured on the 2-core VM): left to the readers, every miss into a
// never-used slot paid it on the critical path (docs/LEARNED.md). This thread faults slot pages
// in ahead of the reads, at SCHED_IDLE so it only uses idle CPU. The free list hands slots out
// in index order, so it keeps the pages from the highest claimed slot to kPopulateAhead bytes
// beyond it populated: RSS follows use instead of jumping to the whole arena at start.
// MADV_POPULATE_WRITE never changes the bytes, so racing a reader on the same slot is harmless.
// The Engram page pool (at most 64 MiB unless --engram-pool asks for more) is populated whole,
// first: its pages are read one token ahead of their use, a fault there is on the decode path.
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>

#include "ioserver/data_plane/io_server_impl.hpp"

namespace waste {

void IoServer::Impl::populate_arena() {
  sched_param param{};
  ::sched_setscheduler(0, SCHED_IDLE, &param);  // this thread only; failure just means normal priority
  constexpr std::uint64_t kChunk = std::uint64_t{32} << 20;
  const std::uint64_t pool_bytes = std::uint64_t(layout.n_engram_pages) * ipc::kEngramPageBytes;
  for (std::uint64_t off = 0; off < pool_bytes && !stopping.load(std::memory_order_relaxed); off += kChunk) {
    if (::madvise(view.engram_page(0) + off, std::min(kChunk, pool_bytes - off), MADV_POPULATE_WRITE) != 0) break;
  }
  std::byte* const begin = view.slot_data(0);
  const std::uint64_t slot_bytes = layout.slot_bytes;
  const std::uint64_t bytes = std::uint64_t(layout.n_slots) * slot_bytes;
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
void IoServer::Impl::note_claimed(std::uint32_t slot) {
  if (slot + 1 > slots_claimed.load(std::memory_order_relaxed)) slots_claimed.store(slot + 1, std::memory_order_relaxed);
}

}  // namespace waste

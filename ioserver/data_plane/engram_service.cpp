// IoServer's Engram pages: demands (pin the page; answered at once when resident, else when its
// read lands, for every client waiting on it), prefetches (read into the pool, no pin, no
// answer), engram_release (unpin every page the client holds), and the landing of a page read.
// Every entry reached here passed check_request against the daemon's own table counts.
#include <cstdio>

#include "ioserver/data_plane/io_server_impl.hpp"

namespace waste {

namespace {

std::string page_name(const EngramPageReader& reader, int table, std::uint64_t page) {
  return reader.tables()[std::size_t(table)].name + ": page " + std::to_string(page);
}

}  // namespace

void IoServer::Impl::push_engram_completion(int c, const ipc::EngramCompletion& completion) {
  Client& client = clients[std::size_t(c)];
  if (!client.attached || client.breached) return;
  switch (client.completions->try_push_checked(ipc::encode_engram_completion(completion))) {
    case ipc::RingProducer::Push::pushed: client.completions->notify(); return;
    case ipc::RingProducer::Push::full:
      breach(c, "completion ring full (more than " + std::to_string(ipc::kRingCapacity - 1) +
                    " demands outstanding) when answering Engram demand tag " + std::to_string(completion.tag));
      return;
    case ipc::RingProducer::Push::breach:
      breach(c, "completion ring head " +
                    std::to_string(client.ring_shm().completion.head.load(std::memory_order_relaxed)) +
                    " is ahead of the daemon's tail");
      return;
  }
}

void IoServer::Impl::push_engram_error(int c, int table, std::uint64_t page, std::uint32_t tag,
                                       ipc::CompletionError code, const std::string& text) {
  if (!clients[std::size_t(c)].attached || clients[std::size_t(c)].breached) return;
  const std::string name = page_name(*engram_reader, table, page);
  ipc::write_error_text(view.client(c), text.starts_with(name) ? text : name + ": " + text);
  push_engram_completion(c, ipc::EngramCompletion{tag, true, true, std::uint32_t(code)});
}

void IoServer::Impl::handle_engram_demand(int c, int table, std::uint64_t page, std::uint32_t tag) {
  Client& client = clients[std::size_t(c)];
  const auto lookup = engram_pool->find_or_claim(EngramPagePool::key(table, page));
  if (lookup.outcome == EngramPagePool::Outcome::no_victim) {
    push_engram_error(c, table, page, tag, ipc::CompletionError::arena_full,
                      "every one of the " + std::to_string(engram_pool->n_slots()) +
                          " Engram pool slots is pinned or being read");
    return;
  }
  if (!engram_pool->pinned_by(lookup.slot, c)) client.engram_pinned.push_back(lookup.slot);
  engram_pool->pin(lookup.slot, c);
  EngramCounters& counts = engram_counts[std::size_t(table)];
  ipc::EngramTableShm& shm_table = view.engram_table(std::uint32_t(table));
  if (lookup.outcome == EngramPagePool::Outcome::ready) {
    // Relaxed counters: diagnostics only (stats reads the daemon's own copies under the mutex).
    ++counts.hits;
    shm_table.hits.fetch_add(1, std::memory_order_relaxed);
    push_engram_completion(c, ipc::EngramCompletion{tag, false, false, lookup.slot});
    return;
  }
  ++counts.misses;
  shm_table.misses.fetch_add(1, std::memory_order_relaxed);
  engram_pool->add_waiter(lookup.slot, c, tag);
  if (lookup.outcome == EngramPagePool::Outcome::claimed) {
    engram_readers->submit(ReaderPool::Job{lookup.slot, table, int(std::uint32_t(page)), c, client.generation, false});
  }
}

void IoServer::Impl::handle_engram_prefetch(int c, int table, std::uint64_t page) {
  const auto lookup = engram_pool->find_or_claim(EngramPagePool::key(table, page));
  if (lookup.outcome == EngramPagePool::Outcome::claimed) {
    engram_readers->submit(ReaderPool::Job{lookup.slot, table, int(std::uint32_t(page)), c,
                                           clients[std::size_t(c)].generation, true});
  }
}

void IoServer::Impl::handle_engram_release(int c) {
  Client& client = clients[std::size_t(c)];
  for (std::uint32_t slot : client.engram_pinned) {
    engram_pool->drop_waiters(slot, c);
    engram_pool->unpin(slot, c);
  }
  client.engram_pinned.clear();
}

void IoServer::Impl::on_engram_read_done(const ReaderPool::Job& job, const Status& status) {
  std::lock_guard lock(mutex);
  const auto waiters = engram_pool->take_waiters(job.slot);
  const int table = job.layer;
  const std::uint64_t page = std::uint32_t(job.expert);
  EngramCounters& counts = engram_counts[std::size_t(table)];
  if (status) {
    ++counts.reads;
    counts.bytes_read += ipc::kEngramPageBytes;
    if (job.prefetch) ++counts.prefetch_reads;
    view.engram_table(std::uint32_t(table)).bytes_read.fetch_add(ipc::kEngramPageBytes, std::memory_order_relaxed);
    engram_pool->mark_ready(job.slot);
    // SYNC POINT: the reader thread wrote the slot's bytes before taking the mutex here; each
    // push's release store of the completion tail (RingProducer) publishes them to the client's
    // acquire pop. A later hit (another client) is pushed under the same mutex, after this.
    for (const auto& w : waiters) push_engram_completion(w.client, ipc::EngramCompletion{w.tag, false, true, job.slot});
  } else {
    // The key leaves the pool before the error goes out: whatever the read left is never served.
    ++counts.read_errors;
    engram_pool->mark_failed(job.slot);
    const std::string name = page_name(*engram_reader, table, page);
    const std::string& text = status.error().message;
    std::fprintf(stderr, "waste-ioserver: %s\n", (text.starts_with(name) ? text : name + ": " + text).c_str());
    for (const auto& w : waiters) {
      push_engram_error(w.client, table, page, w.tag, ipc::CompletionError::read_failed, text);
    }
  }
  settle_breaches();
}

}  // namespace waste

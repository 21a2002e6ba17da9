#include "ioserver/engram/engram_page_pool.hpp"

#include <algorithm>
#include <bit>

namespace waste {

EngramPagePool::EngramPagePool(std::uint32_t n_slots) : slots_(n_slots) {
  const std::uint64_t cap = std::bit_ceil(std::max<std::uint64_t>(2 * std::uint64_t(n_slots), 2));
  index_.assign(cap, Entry{0, kNone});
  mask_ = cap - 1;
  free_.reserve(n_slots);
  for (std::uint32_t s = n_slots; s-- > 0;) free_.push_back(s);
  for (auto& s : slots_) s.waiters.reserve(2);
}

std::uint32_t EngramPagePool::home(std::uint64_t key) const noexcept {
  std::uint64_t h = key;  // murmur3 finaliser
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return std::uint32_t(h & mask_);
}

std::uint32_t EngramPagePool::index_find(std::uint64_t key) const noexcept {
  for (std::uint64_t i = home(key);; i = (i + 1) & mask_) {
    const Entry& e = index_[i];
    if (e.slot == kNone) return kNone;
    if (e.key == key) return e.slot;
  }
}

void EngramPagePool::index_insert(std::uint64_t key, std::uint32_t slot) noexcept {
  std::uint64_t i = home(key);
  while (index_[i].slot != kNone) i = (i + 1) & mask_;
  index_[i] = Entry{key, slot};
}

void EngramPagePool::index_erase(std::uint64_t key) noexcept {
  std::uint64_t i = home(key);
  while (index_[i].slot != kNone && index_[i].key != key) i = (i + 1) & mask_;
  if (index_[i].slot == kNone) return;
  // Backward shift: move later entries of the run into the hole when their home allows it.
  for (std::uint64_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
    if (index_[j].slot == kNone) break;
    const std::uint64_t h = home(index_[j].key);
    // j's entry may move to i when its home is not in the cyclic range (i, j].
    const bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
    if (stays) continue;
    index_[i] = index_[j];
    i = j;
  }
  index_[i] = Entry{0, kNone};
}

void EngramPagePool::list_remove(std::uint32_t s) {
  Slot& x = slots_[s];
  if (!x.listed) return;
  if (x.prev != kNone) slots_[x.prev].next = x.next; else lru_ = x.next;
  if (x.next != kNone) slots_[x.next].prev = x.prev; else mru_ = x.prev;
  x.prev = x.next = kNone;
  x.listed = false;
}

void EngramPagePool::list_push_mru(std::uint32_t s) {
  Slot& x = slots_[s];
  x.prev = mru_;
  x.next = kNone;
  if (mru_ != kNone) slots_[mru_].next = s; else lru_ = s;
  mru_ = s;
  x.listed = true;
}

void EngramPagePool::settle(std::uint32_t s) {
  const Slot& x = slots_[s];
  const bool evictable = x.state == State::ready && x.pins == 0;
  if (evictable && !x.listed) list_push_mru(s);
  if (!evictable) list_remove(s);
}

bool EngramPagePool::resident(std::uint64_t key) const noexcept { return index_find(key) != kNone; }

EngramPagePool::Lookup EngramPagePool::find_or_claim(std::uint64_t key) {
  if (const std::uint32_t s = index_find(key); s != kNone) {
    if (slots_[s].state == State::ready) {
      list_remove(s);  // used now: to the MRU end when it is evictable again
      settle(s);
      return Lookup{Outcome::ready, s};
    }
    return Lookup{Outcome::inflight, s};
  }
  std::uint32_t s = kNone;
  if (!free_.empty()) {
    s = free_.back();
    free_.pop_back();
    ++used_;
  } else if (lru_ != kNone) {
    s = lru_;
    list_remove(s);
    index_erase(slots_[s].key);
    ++evictions_;
  } else {
    return Lookup{Outcome::no_victim, 0};
  }
  Slot& x = slots_[s];
  x.key = key;
  x.state = State::inflight;
  x.pins = 0;
  x.waiters.clear();
  index_insert(key, s);
  return Lookup{Outcome::claimed, s};
}

void EngramPagePool::pin(std::uint32_t slot, int client) {
  slots_[slot].pins |= std::uint64_t{1} << client;
  settle(slot);
}

void EngramPagePool::unpin(std::uint32_t slot, int client) {
  slots_[slot].pins &= ~(std::uint64_t{1} << client);
  settle(slot);
}

bool EngramPagePool::pinned_by(std::uint32_t slot, int client) const noexcept {
  return (slots_[slot].pins >> client) & 1;
}

void EngramPagePool::add_waiter(std::uint32_t slot, int client, std::uint32_t tag) {
  slots_[slot].waiters.push_back(Waiter{client, tag});
}

void EngramPagePool::drop_waiters(std::uint32_t slot, int client) {
  std::erase_if(slots_[slot].waiters, [client](const Waiter& w) { return w.client == client; });
}

std::vector<EngramPagePool::Waiter> EngramPagePool::take_waiters(std::uint32_t slot) {
  std::vector<Waiter> out;
  out.swap(slots_[slot].waiters);
  slots_[slot].waiters.reserve(2);
  return out;
}

void EngramPagePool::mark_ready(std::uint32_t slot) {
  slots_[slot].state = State::ready;
  settle(slot);
}

void EngramPagePool::mark_failed(std::uint32_t slot) {
  Slot& x = slots_[slot];
  list_remove(slot);
  index_erase(x.key);
  x.state = State::empty;
  x.pins = 0;
  free_.push_back(slot);
  --used_;
}

std::uint32_t EngramPagePool::pinned() const noexcept {
  return std::uint32_t(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.pins != 0; }));
}

}  // namespace waste

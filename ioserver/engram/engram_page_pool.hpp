// EngramPagePool: the daemon's bookkeeping for the Engram page pool (the pool's 4 KiB slots
// live in the arena segment, shm_layout.md). Daemon-private, used under IoServer's cache mutex.
// A key is (table << 32 | page). Per slot: state (empty / inflight / ready), the clients that pin
// it (a demand pins until that client's engram_release), the demands waiting for its read (client
// and tag). Victims: least recently used among ready, unpinned slots (an intrusive list, O(1));
// inflight or pinned slots are never reused. The key->slot index is open addressing with linear
// probing and backward-shift deletion; everything is allocated in the constructor except the
// waiter lists (a few entries, reused).
#pragma once

#include <cstdint>
#include <vector>

namespace waste {

class EngramPagePool {
 public:
  enum class Outcome : std::uint8_t { ready, inflight, claimed, no_victim };
  struct Lookup {
    Outcome outcome;
    std::uint32_t slot;  // meaningless for no_victim
  };
  struct Waiter {
    int client;
    std::uint32_t tag;
  };

  explicit EngramPagePool(std::uint32_t n_slots);

  static constexpr std::uint64_t key(int table, std::uint64_t page) noexcept {
    return (std::uint64_t(std::uint32_t(table)) << 32) | (page & 0xFFFFFFFFull);
  }
  // The slot of `key`: resident (ready or inflight), or a free / evicted slot claimed for it
  // (the caller starts the read), or no_victim when every slot is pinned or inflight.
  Lookup find_or_claim(std::uint64_t key);
  [[nodiscard]] bool resident(std::uint64_t key) const noexcept;

  void pin(std::uint32_t slot, int client);
  void unpin(std::uint32_t slot, int client);
  [[nodiscard]] bool pinned_by(std::uint32_t slot, int client) const noexcept;
  void add_waiter(std::uint32_t slot, int client, std::uint32_t tag);
  void drop_waiters(std::uint32_t slot, int client);
  std::vector<Waiter> take_waiters(std::uint32_t slot);

  void mark_ready(std::uint32_t slot);   // the read landed
  void mark_failed(std::uint32_t slot);  // the read failed: the key leaves, the slot is free

  [[nodiscard]] std::uint32_t n_slots() const noexcept { return std::uint32_t(slots_.size()); }
  [[nodiscard]] std::uint32_t used() const noexcept { return used_; }
  [[nodiscard]] std::uint32_t pinned() const noexcept;
  [[nodiscard]] std::uint64_t evictions() const noexcept { return evictions_; }

 private:
  enum class State : std::uint8_t { empty, inflight, ready };
  static constexpr std::uint32_t kNone = 0xFFFFFFFFu;
  struct Slot {
    std::uint64_t key = 0;
    std::uint64_t pins = 0;  // bit c: client c
    State state = State::empty;
    std::uint32_t prev = kNone, next = kNone;  // LRU links while evictable (ready, unpinned)
    bool listed = false;
    std::vector<Waiter> waiters;
  };
  void list_remove(std::uint32_t s);
  void list_push_mru(std::uint32_t s);
  void settle(std::uint32_t s);  // into the LRU list when ready and unpinned, out of it otherwise

  // index
  [[nodiscard]] std::uint32_t home(std::uint64_t key) const noexcept;
  [[nodiscard]] std::uint32_t index_find(std::uint64_t key) const noexcept;
  void index_insert(std::uint64_t key, std::uint32_t slot) noexcept;
  void index_erase(std::uint64_t key) noexcept;
  struct Entry {
    std::uint64_t key;
    std::uint32_t slot;  // kNone: empty
  };
  std::vector<Entry> index_;
  std::uint64_t mask_ = 0;

  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;  // empty slots
  std::uint32_t lru_ = kNone, mru_ = kNone;
  std::uint32_t used_ = 0;
  std::uint64_t evictions_ = 0;
};

}  // namespace waste

// A single-producer / single-consumer ring of 8-byte entries in shared memory.
//
// RingShm holds the state (indices, never pointers, so it works at any mapping address);
// RingProducer and RingConsumer are the only API. Exactly one thread of one process may use the
// producer side of a given ring at a time, and one the consumer side (in WASTE: the client
// compute thread produces requests, the ioserver produces completions under its cache mutex).
//
// head and tail are free-running 64-bit counters (no wrap in practice); slot = counter % capacity.
// Full: tail - head == capacity. Empty: tail == head.
//
// Trust: the daemon treats the client side of every ring as untrusted memory. It keeps its own
// copy of the index it writes, reads the peer's index once per call and checks it
// (try_pop_checked / try_push_checked): an index that no honest peer can produce is a breach,
// reported to the caller, and nothing is read or written outside the entry array.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "shared/ipc/doorbell.hpp"

namespace waste::ipc {

inline constexpr std::uint32_t kRingCapacity = 1024;  // entries; power of two
static_assert((kRingCapacity & (kRingCapacity - 1)) == 0, "index math uses a mask");

struct RingShm {
  // Written by the consumer only (store-release after reading an entry); read by the producer.
  alignas(64) std::atomic<std::uint64_t> head{0};
  // Written by the producer only (store-release after writing an entry); read by the consumer.
  alignas(64) std::atomic<std::uint64_t> tail{0};
  // The consumer sleeps here; the producer rings it after a push.
  alignas(64) DoorbellShm bell;
  // Entries: written by the producer before its tail release, read by the consumer after its tail
  // acquire. Atomic (relaxed) so a torn or stale read by a crashed peer is at worst a wrong value.
  alignas(64) std::atomic<std::uint64_t> entries[kRingCapacity];

  // Only while no producer or consumer is active (attach, reclaim).
  void reset() noexcept;
};
static_assert(std::is_standard_layout_v<RingShm>, "RingShm lives in shared memory");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "ring indices must be lock-free across processes");
static_assert(offsetof(RingShm, tail) - offsetof(RingShm, head) >= 64, "head and tail on separate cache lines");
static_assert(sizeof(RingShm) % 64 == 0, "rings are packed back to back on cache-line boundaries");

class RingProducer {
 public:
  explicit RingProducer(RingShm& ring) noexcept : ring_(&ring), tail_(ring.tail.load(std::memory_order_relaxed)) {}
  // False when full. Does not wake the consumer: call notify() after a batch.
  bool try_push(std::uint64_t entry) noexcept;
  // For an untrusted consumer: `breach` when its head is ahead of our tail (it claims entries
  // never pushed). `full` is left to the caller to judge.
  enum class Push : std::uint8_t { pushed, full, breach };
  Push try_push_checked(std::uint64_t entry) noexcept;
  // Wake the consumer if it sleeps (no syscall otherwise).
  void notify() noexcept { ring_doorbell(ring_->bell); }
  [[nodiscard]] std::uint64_t size() const noexcept;

 private:
  RingShm* ring_;
  std::uint64_t tail_;  // private copy: only this producer writes tail
};

class RingConsumer {
 public:
  explicit RingConsumer(RingShm& ring) noexcept : ring_(&ring), head_(ring.head.load(std::memory_order_relaxed)) {}
  std::optional<std::uint64_t> try_pop() noexcept;
  // For an untrusted producer: reads tail once; `breach` (nothing consumed) when tail is behind
  // our head or more than kRingCapacity ahead of it.
  enum class Pop : std::uint8_t { empty, entry, breach };
  struct Popped {
    Pop status;
    std::uint64_t entry;  // valid when status == entry
    std::uint64_t tail;   // the tail that was read (for the breach report)
  };
  Popped try_pop_checked() noexcept;
  [[nodiscard]] std::uint64_t head() const noexcept { return head_; }
  [[nodiscard]] bool empty() const noexcept;
  // Spin, then sleep until non-empty or timeout. True when an entry is available.
  bool wait(int spin, std::chrono::microseconds timeout) noexcept;
  [[nodiscard]] RingShm& shm() noexcept { return *ring_; }

 private:
  RingShm* ring_;
  std::uint64_t head_;  // private copy: only this consumer writes head
};

inline bool RingProducer::try_push(std::uint64_t entry) noexcept {
  // SYNC POINT: acquire pairs with the consumer's head store-release, so its read of the old entry
  // in this slot happened before we overwrite it.
  const std::uint64_t head = ring_->head.load(std::memory_order_acquire);
  if (tail_ - head >= kRingCapacity) return false;
  ring_->entries[tail_ & (kRingCapacity - 1)].store(entry, std::memory_order_relaxed);
  ++tail_;
  // SYNC POINT: release publishes the entry; pairs with the consumer's tail load-acquire.
  ring_->tail.store(tail_, std::memory_order_release);
  return true;
}

inline RingProducer::Push RingProducer::try_push_checked(std::uint64_t entry) noexcept {
  // SYNC POINT: as in try_push.
  const std::uint64_t head = ring_->head.load(std::memory_order_acquire);
  if (head > tail_) return Push::breach;
  if (tail_ - head >= kRingCapacity) return Push::full;
  ring_->entries[tail_ & (kRingCapacity - 1)].store(entry, std::memory_order_relaxed);
  ++tail_;
  // SYNC POINT: as in try_push.
  ring_->tail.store(tail_, std::memory_order_release);
  return Push::pushed;
}

inline std::uint64_t RingProducer::size() const noexcept {
  return tail_ - ring_->head.load(std::memory_order_acquire);
}

inline std::optional<std::uint64_t> RingConsumer::try_pop() noexcept {
  // SYNC POINT: acquire pairs with the producer's tail store-release.
  const std::uint64_t tail = ring_->tail.load(std::memory_order_acquire);
  if (tail == head_) return std::nullopt;
  const std::uint64_t entry = ring_->entries[head_ & (kRingCapacity - 1)].load(std::memory_order_relaxed);
  ++head_;
  // SYNC POINT: release hands the slot back; pairs with the producer's head load-acquire.
  ring_->head.store(head_, std::memory_order_release);
  return entry;
}

inline RingConsumer::Popped RingConsumer::try_pop_checked() noexcept {
  // SYNC POINT: acquire pairs with the producer's tail store-release.
  const std::uint64_t tail = ring_->tail.load(std::memory_order_acquire);
  if (tail == head_) return {Pop::empty, 0, tail};
  if (tail < head_ || tail - head_ > kRingCapacity) return {Pop::breach, 0, tail};
  const std::uint64_t entry = ring_->entries[head_ & (kRingCapacity - 1)].load(std::memory_order_relaxed);
  ++head_;
  // SYNC POINT: release hands the slot back; pairs with the producer's head load-acquire.
  ring_->head.store(head_, std::memory_order_release);
  return {Pop::entry, entry, tail};
}

inline bool RingConsumer::empty() const noexcept {
  return ring_->tail.load(std::memory_order_acquire) == head_;
}

inline bool RingConsumer::wait(int spin, std::chrono::microseconds timeout) noexcept {
  return wait_doorbell(ring_->bell, [this] { return !empty(); }, spin, timeout);
}

inline void RingShm::reset() noexcept {
  head.store(0, std::memory_order_relaxed);
  tail.store(0, std::memory_order_relaxed);
  bell.word.store(0, std::memory_order_relaxed);
  bell.sleepers.store(0, std::memory_order_relaxed);
  for (auto& e : entries) e.store(0, std::memory_order_relaxed);
}

}  // namespace waste::ipc

// Doorbell: a 32-bit futex word plus a sleeper count, both in shared memory, and the
// spin-then-block wait built on them. The ringer pays a syscall only when someone sleeps, so a
// busy peer (spinning or working) never costs a syscall.
//
// Protocol (an eventcount; the classic Dekker pairing, made explicit):
//   waiter: sleepers.fetch_add(seq_cst); seq = word.load(seq_cst); if (ready()) done;
//           FUTEX_WAIT(word, seq, timeout); sleepers.fetch_sub
//   ringer: (publish the work, e.g. a ring tail store-release); fence(seq_cst);
//           if (sleepers.load(relaxed) != 0) { word.fetch_add(release); FUTEX_WAKE(all) }
// The two seq_cst points guarantee that either the ringer sees the sleeper or the waiter's
// ready() sees the work. The futex is SHARED (no FUTEX_PRIVATE_FLAG): it is keyed by the
// physical page, so processes that map the segment at different addresses meet on it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace waste::ipc {

struct DoorbellShm {
  std::atomic<std::uint32_t> word{0};      // bumped by ringers; the futex word
  std::atomic<std::uint32_t> sleepers{0};  // waiters inside (or about to enter) FUTEX_WAIT
};
static_assert(sizeof(DoorbellShm) == 8, "two 32-bit words: fits any slot, no torn writes");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "futex words must be plain lock-free u32");
static_assert(std::is_standard_layout_v<DoorbellShm>, "lives in shared memory");

// Wake every sleeper if there is one. Call after publishing the work (see protocol).
void ring_doorbell(DoorbellShm& bell) noexcept;

// Block until ready() is true or `timeout` passes: first spin `spin` iterations polling ready(),
// then sleep on the futex. Returns ready()'s last value. Spurious wake-ups are absorbed.
template <class Ready>
bool wait_doorbell(DoorbellShm& bell, Ready&& ready, int spin, std::chrono::microseconds timeout) noexcept;

// One FUTEX_WAIT on `word` expecting `expected`, at most `timeout` long. Internal helper.
void futex_wait_shared(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                       std::chrono::microseconds timeout) noexcept;
void futex_wake_shared(std::atomic<std::uint32_t>& word) noexcept;
void cpu_relax() noexcept;

template <class Ready>
bool wait_doorbell(DoorbellShm& bell, Ready&& ready, int spin, std::chrono::microseconds timeout) noexcept {
  for (int i = 0; i < spin; ++i) {
    if (ready()) return true;
    cpu_relax();
  }
  // SYNC POINT: pairs with the fence in ring_doorbell (see the protocol above).
  bell.sleepers.fetch_add(1, std::memory_order_seq_cst);
  const std::uint32_t seq = bell.word.load(std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // orders the sleeper count before ready()'s loads
  if (ready()) {
    bell.sleepers.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }
  futex_wait_shared(bell.word, seq, timeout);
  bell.sleepers.fetch_sub(1, std::memory_order_relaxed);
  return ready();
}

}  // namespace waste::ipc

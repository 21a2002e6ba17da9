#include "shared/ipc/doorbell.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace waste::ipc {

void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void futex_wait_shared(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                       std::chrono::microseconds timeout) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "futex needs a bare u32");
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1'000'000) * 1000);
  // Relative timeout; EAGAIN (word moved), EINTR and ETIMEDOUT all just return to the caller,
  // which re-checks its condition.
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_shared(std::atomic<std::uint32_t>& word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void ring_doorbell(DoorbellShm& bell) noexcept {
  // SYNC POINT: pairs with sleepers.fetch_add/word.load in wait_doorbell.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (bell.sleepers.load(std::memory_order_relaxed) != 0) {
    bell.word.fetch_add(1, std::memory_order_release);
    futex_wake_shared(bell.word);
  }
}

}  // namespace waste::ipc

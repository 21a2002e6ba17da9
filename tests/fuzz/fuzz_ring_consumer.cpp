// libFuzzer harness: the daemon's side of a client's ring pair fed garbage. The input is what a
// hostile client can write into its ring segment: the request ring's tail and entries and the
// completion ring's head, interleaved with pops and pushes. The daemon's code path is the one
// IoServer uses (RingConsumer::try_pop_checked + check_request, RingProducer::try_push_checked);
// the invariants below are what the daemon relies on, and any violation traps.
//
// Self-contained against shared/ipc/spsc_ring.hpp and shared/ipc/ring_entries.hpp (header-only,
// no Result<>, so clang 14 compiles it). Links: waste_shared (doorbell.cpp), though the harness
// never sleeps or rings. Build by hand:
//   clang++ -std=c++2b -O1 -g -fsanitize=fuzzer,address -I. tests/fuzz/fuzz_ring_consumer.cpp \
//     shared/ipc/doorbell.cpp -o fuzz_ring_consumer
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "shared/ipc/ring_entries.hpp"
#include "shared/ipc/spsc_ring.hpp"

namespace {

using namespace waste::ipc;

#define WASTE_FUZZ_CHECK(cond) \
  do {                         \
    if (!(cond)) __builtin_trap(); \
  } while (0)

struct Input {
  const std::uint8_t* p;
  std::size_t n;
  bool take(void* out, std::size_t k) {
    if (n < k) return false;
    std::memcpy(out, p, k);
    p += k;
    n -= k;
    return true;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in{data, size};
  std::uint16_t layers_raw = 0, experts_raw = 0;
  if (!in.take(&layers_raw, 2) || !in.take(&experts_raw, 2)) return 0;
  const int n_layers = 1 + layers_raw % kMaxLayers;
  const int n_experts = 1 + int(experts_raw) * 257 % kMaxExperts;

  // Fresh rings, as IoServer::attach creates them; the daemon's consumer and producer start there.
  auto requests = std::make_unique<RingShm>();
  auto completions = std::make_unique<RingShm>();
  RingConsumer consumer(*requests);
  RingProducer producer(*completions);
  std::uint64_t produced = 0;

  for (int step = 0; step < 4096; ++step) {
    std::uint8_t op = 0;
    if (!in.take(&op, 1)) break;
    switch (op % 5) {
      case 0: {  // the client writes an entry at some index
        std::uint16_t at = 0;
        std::uint64_t entry = 0;
        if (!in.take(&at, 2) || !in.take(&entry, 8)) return 0;
        requests->entries[at % kRingCapacity].store(entry, std::memory_order_relaxed);
        break;
      }
      case 1: {  // the client sets its request tail to anything
        std::uint64_t tail = 0;
        if (!in.take(&tail, 8)) return 0;
        requests->tail.store(tail, std::memory_order_release);
        break;
      }
      case 2: {  // the client scribbles the consumer-owned head: the daemon must not care
        std::uint64_t head = 0;
        if (!in.take(&head, 8)) return 0;
        requests->head.store(head, std::memory_order_release);
        break;
      }
      case 3: {  // the daemon drains one batch, as IoServer::Impl::drain does
        for (int k = 0; k < 64; ++k) {
          const std::uint64_t head_before = consumer.head();
          const auto popped = consumer.try_pop_checked();
          if (popped.status == RingConsumer::Pop::empty) {
            WASTE_FUZZ_CHECK(popped.tail == head_before);
            break;
          }
          if (popped.status == RingConsumer::Pop::breach) {
            WASTE_FUZZ_CHECK(popped.tail < head_before || popped.tail - head_before > kRingCapacity);
            WASTE_FUZZ_CHECK(consumer.head() == head_before);  // nothing consumed
            break;
          }
          WASTE_FUZZ_CHECK(consumer.head() == head_before + 1);
          WASTE_FUZZ_CHECK(popped.tail > head_before && popped.tail - head_before <= kRingCapacity);
          if (check_request(popped.entry, n_layers, n_experts) != RequestCheck::ok) break;  // breach: detached
          const RingRequest r = decode_request(popped.entry);
          WASTE_FUZZ_CHECK(r.layer >= 0 && r.layer < n_layers);
          if (r.kind == RequestKind::release_layer) {
            WASTE_FUZZ_CHECK(r.expert == 0);
          } else {
            WASTE_FUZZ_CHECK(r.kind == RequestKind::demand || r.kind == RequestKind::prefetch);
            WASTE_FUZZ_CHECK(r.expert >= 0 && r.expert < n_experts);
          }
          // The key and the completion of an accepted request name the same record.
          const std::uint32_t key = make_key(r.layer, r.expert);
          WASTE_FUZZ_CHECK(key_layer(key) == r.layer && key_expert(key) == r.expert);
          const Completion c = decode_completion(encode_completion({r.layer, r.expert, false, true, 7}));
          WASTE_FUZZ_CHECK(c.layer == r.layer && c.expert == r.expert && c.value == 7);
          WASTE_FUZZ_CHECK(encode_request(r.kind, r.layer, r.expert) == popped.entry);
        }
        break;
      }
      case 4: {  // the client sets its completion head; the daemon pushes one completion
        std::uint64_t head = 0;
        if (!in.take(&head, 8)) return 0;
        completions->head.store(head, std::memory_order_release);
        const std::uint64_t tail_before = completions->tail.load(std::memory_order_relaxed);
        const auto result = producer.try_push_checked(encode_completion({0, 0, false, false, 1}));
        const std::uint64_t tail_after = completions->tail.load(std::memory_order_relaxed);
        if (result == RingProducer::Push::pushed) {
          ++produced;
          WASTE_FUZZ_CHECK(tail_after == tail_before + 1 && head <= tail_before && tail_before - head < kRingCapacity);
        } else {
          WASTE_FUZZ_CHECK(tail_after == tail_before);  // nothing written on breach or full
          WASTE_FUZZ_CHECK(result == RingProducer::Push::breach ? head > tail_before
                                                                 : tail_before - head >= kRingCapacity);
        }
        WASTE_FUZZ_CHECK(tail_after == produced);
        break;
      }
    }
  }
  return 0;
}

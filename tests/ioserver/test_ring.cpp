#include <memory>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "shared/ipc/shm_layout.hpp"
#include "shared/ipc/spsc_ring.hpp"

using namespace waste::ipc;

TEST_CASE("An empty ring pops nothing and a full ring refuses a push", "[ioserver][ipc]") {
  auto ring = std::make_unique<RingShm>();
  RingProducer producer(*ring);
  RingConsumer consumer(*ring);
  REQUIRE(consumer.empty());
  REQUIRE_FALSE(consumer.try_pop().has_value());
  for (std::uint32_t i = 0; i < kRingCapacity; ++i) REQUIRE(producer.try_push(i + 100));
  REQUIRE_FALSE(producer.try_push(999));
  REQUIRE(producer.size() == kRingCapacity);
  REQUIRE(consumer.try_pop() == std::optional<std::uint64_t>(100));
  REQUIRE(producer.try_push(999));  // one slot freed
  REQUIRE_FALSE(producer.try_push(1000));
}

TEST_CASE("Entries keep FIFO order across many wrap-arounds", "[ioserver][ipc]") {
  auto ring = std::make_unique<RingShm>();
  RingProducer producer(*ring);
  RingConsumer consumer(*ring);
  std::uint64_t next_in = 0, next_out = 0;
  // Uneven batch sizes make the indices cross the end of the buffer at varying offsets.
  for (int round = 0; round < 50; ++round) {
    const int batch = 1 + (round * 37) % 700;
    for (int i = 0; i < batch; ++i) REQUIRE(producer.try_push(next_in++ * 3));
    const int take = batch - (round % 3);
    for (int i = 0; i < take; ++i) {
      const auto e = consumer.try_pop();
      REQUIRE(e.has_value());
      REQUIRE(*e == next_out++ * 3);
    }
  }
  while (auto e = consumer.try_pop()) REQUIRE(*e == next_out++ * 3);
  REQUIRE(next_out == next_in);
  REQUIRE(ring->head.load() > 10 * kRingCapacity);  // really wrapped
}

TEST_CASE("Two threads pass a million entries in order through the ring", "[ioserver][ipc]") {
  auto ring = std::make_unique<RingShm>();
  constexpr std::uint64_t kCount = 1'000'000;
  std::thread producer_thread([&] {
    RingProducer producer(*ring);
    for (std::uint64_t i = 0; i < kCount; ++i) {
      while (!producer.try_push(i ^ 0x5555)) std::this_thread::yield();
      if ((i & 63) == 0) producer.notify();
    }
    producer.notify();
  });
  RingConsumer consumer(*ring);
  std::uint64_t expected = 0;
  bool in_order = true;
  while (expected < kCount) {
    if (auto e = consumer.try_pop()) {
      in_order = in_order && (*e == (expected ^ 0x5555));
      ++expected;
    } else {
      consumer.wait(100, std::chrono::milliseconds(50));
    }
  }
  producer_thread.join();
  REQUIRE(in_order);
  REQUIRE(consumer.empty());
}

TEST_CASE("A sleeping consumer is woken by the producer's notify", "[ioserver][ipc]") {
  auto ring = std::make_unique<RingShm>();
  RingConsumer consumer(*ring);
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    // No spinning: go straight to the futex with a long timeout; only a wake returns early.
    got = consumer.wait(0, std::chrono::seconds(20));
  });
  while (ring->bell.sleepers.load() == 0) std::this_thread::yield();
  RingProducer producer(*ring);
  REQUIRE(producer.try_push(42));
  const auto t0 = std::chrono::steady_clock::now();
  producer.notify();
  waiter.join();
  REQUIRE(got.load());
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  REQUIRE(consumer.try_pop() == std::optional<std::uint64_t>(42));
}

TEST_CASE("Request and completion entries round-trip through their 8-byte encodings", "[ioserver][ipc]") {
  const auto r = decode_request(encode_request(RequestKind::prefetch, 60, 383));
  REQUIRE(r.kind == RequestKind::prefetch);
  REQUIRE(r.layer == 60);
  REQUIRE(r.expert == 383);
  const Completion c{26, 255, false, true, 123456};
  const auto d = decode_completion(encode_completion(c));
  REQUIRE(d.layer == 26);
  REQUIRE(d.expert == 255);
  REQUIRE_FALSE(d.error);
  REQUIRE(d.miss);
  REQUIRE(d.value == 123456u);
  const auto e = decode_completion(encode_completion({1, 2, true, false, std::uint32_t(CompletionError::arena_full)}));
  REQUIRE(e.error);
  REQUIRE(CompletionError(e.value) == CompletionError::arena_full);
}

TEST_CASE("The arena layout aligns the slots for O_DIRECT and keeps regions disjoint", "[ioserver][ipc]") {
  const auto l = ArenaLayout::compute(9776, 5, 3);
  REQUIRE(l.slot_bytes == 12288);
  REQUIRE(l.arena_offset % 4096 == 0);
  REQUIRE(l.slots_offset == sizeof(ControlHeaderShm));
  REQUIRE(l.clients_offset >= l.slots_offset + 5 * sizeof(SlotShm));
  REQUIRE(l.rings_offset >= l.clients_offset + 3 * sizeof(ClientShm));
  REQUIRE(l.arena_offset >= l.rings_offset + 6 * sizeof(RingShm));
  REQUIRE(l.total_bytes == l.arena_offset + 5 * 12288);
}

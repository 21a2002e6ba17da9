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

TEST_CASE("Expert ids beyond 16 bits round-trip through requests, completions and cache keys", "[ioserver][ipc]") {
  // The hazard: 16-bit fields silently truncated expert 65536 to expert 0.
  for (const int expert : {0, 255, 65535, 65536, 70000, kMaxExperts - 1}) {
    const auto r = decode_request(encode_request(RequestKind::demand, kMaxLayers - 1, expert));
    REQUIRE(r.kind == RequestKind::demand);
    REQUIRE(r.layer == kMaxLayers - 1);
    REQUIRE(r.expert == expert);
    REQUIRE(check_request(encode_request(RequestKind::demand, kMaxLayers - 1, expert), kMaxLayers, kMaxExperts) ==
            RequestCheck::ok);
    REQUIRE_FALSE(is_engram_completion(encode_completion({kMaxLayers - 1, expert, true, true, 0x3FFFFFFFu})));
    const auto d = decode_completion(encode_completion({kMaxLayers - 1, expert, false, true, 0x3FFFFFFFu}));
    REQUIRE(d.layer == kMaxLayers - 1);
    REQUIRE(d.expert == expert);
    REQUIRE(d.value == 0x3FFFFFFFu);
    REQUIRE(key_layer(make_key(kMaxLayers - 1, expert)) == kMaxLayers - 1);
    REQUIRE(key_expert(make_key(kMaxLayers - 1, expert)) == expert);
  }
  REQUIRE(make_key(kMaxLayers - 1, kMaxExperts - 1) != 0xFFFFFFFFu);  // never SlotIndex's empty marker
}

TEST_CASE("Garbage request entries are classified as breaches, never decoded into a key", "[ioserver][ipc]") {
  // Hazard: a client writes arbitrary 64-bit words into its request ring.
  REQUIRE(check_request(encode_request(RequestKind::demand, 3, 7), 4, 8) == RequestCheck::ok);
  REQUIRE(check_request(encode_request(RequestKind::demand, 4, 7), 4, 8) == RequestCheck::bad_layer);
  REQUIRE(check_request(encode_request(RequestKind::prefetch, 3, 8), 4, 8) == RequestCheck::bad_expert);
  REQUIRE(check_request(encode_request(RequestKind::release_layer, 3, 0), 4, 8) == RequestCheck::ok);
  REQUIRE(check_request(encode_request(RequestKind::release_layer, 3, 1), 4, 8) == RequestCheck::bad_expert);
  REQUIRE(check_request(encode_request(RequestKind(9), 0, 0), 4, 8) == RequestCheck::bad_kind);
  REQUIRE(check_request(encode_request(RequestKind::demand, 0, 0) | (std::uint64_t{1} << 63), 4, 8) ==
          RequestCheck::reserved_bits);
  REQUIRE(check_request(~std::uint64_t{0}, 4, 8) == RequestCheck::reserved_bits);
}

TEST_CASE("A ring consumer refuses a tail behind its head or more than capacity ahead", "[ioserver][ipc]") {
  // Hazard: garbage head/tail written by the untrusted producer (the client).
  RingShm ring;
  RingConsumer consumer(ring);
  RingProducer producer(ring);
  REQUIRE(producer.try_push(5));
  auto p = consumer.try_pop_checked();
  REQUIRE(p.status == RingConsumer::Pop::entry);
  REQUIRE(p.entry == 5);
  REQUIRE(consumer.try_pop_checked().status == RingConsumer::Pop::empty);
  ring.tail.store(1 + kRingCapacity + 1);  // one more than a full ring
  p = consumer.try_pop_checked();
  REQUIRE(p.status == RingConsumer::Pop::breach);
  REQUIRE(p.tail == 1 + kRingCapacity + 1);
  REQUIRE(consumer.head() == 1);           // nothing consumed
  ring.tail.store(1 + kRingCapacity);      // exactly full is legal
  REQUIRE(consumer.try_pop_checked().status == RingConsumer::Pop::entry);
  ring.tail.store(0);                      // behind the head
  REQUIRE(consumer.try_pop_checked().status == RingConsumer::Pop::breach);
  REQUIRE(consumer.head() == 2);
}

TEST_CASE("A ring producer refuses a consumer head ahead of its tail", "[ioserver][ipc]") {
  // Hazard: the client scribbles its completion ring's head.
  RingShm ring;
  RingProducer producer(ring);
  REQUIRE(producer.try_push_checked(1) == RingProducer::Push::pushed);
  ring.head.store(7);
  REQUIRE(producer.try_push_checked(2) == RingProducer::Push::breach);
  REQUIRE(ring.tail.load() == 1);  // nothing written
  ring.head.store(1);
  for (std::uint32_t i = 0; i < kRingCapacity; ++i) REQUIRE(producer.try_push_checked(i) == RingProducer::Push::pushed);
  REQUIRE(producer.try_push_checked(0) == RingProducer::Push::full);
}

TEST_CASE("The arena layout aligns the slots for O_DIRECT and keeps regions disjoint", "[ioserver][ipc]") {
  const auto l = ArenaLayout::compute(9776, 5, 3, 4);
  REQUIRE(l.slot_bytes == 12288);
  REQUIRE(l.arena_offset % 4096 == 0);
  REQUIRE(l.slots_offset == sizeof(ControlHeaderShm));
  REQUIRE(l.clients_offset >= l.slots_offset + 5 * sizeof(SlotShm));
  REQUIRE(l.identity_offset >= l.clients_offset + 3 * sizeof(ClientShm));
  REQUIRE(l.arena_offset >= l.identity_offset + 4 * sizeof(FileIdentityShm));
  REQUIRE(l.total_bytes == l.arena_offset + 5 * 12288);
}

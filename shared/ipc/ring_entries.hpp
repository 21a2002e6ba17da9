// The 8-byte entries of the request and completion rings, the cache key, and the daemon's check
// of every request it pops. Header-only and free of Result<> so the libFuzzer harness
// (tests/fuzz/fuzz_ring_consumer.cpp, built with clang 14, which lacks std::expected) can use it.
// See docs/design/ring.md for the bit layout.
#pragma once

#include <cstdint>

namespace waste::ipc {

// Limits of the encodings below. IoServer refuses a container beyond them at creation, so no
// layer or expert id is ever truncated silently.
inline constexpr int kMaxLayers = 256;         // 8 bits in completions and keys
// 24 bits everywhere; the all-ones id is left out so no key equals SlotIndex's empty marker.
inline constexpr int kMaxExperts = (1 << 24) - 1;

// Cache key of one record: bits 24..31 layer, 0..23 expert.
constexpr std::uint32_t make_key(int layer, int expert) noexcept {
  return (std::uint32_t(layer & 0xFF) << 24) | std::uint32_t(expert & 0xFFFFFF);
}
constexpr int key_layer(std::uint32_t key) noexcept { return int(key >> 24); }
constexpr int key_expert(std::uint32_t key) noexcept { return int(key & 0xFFFFFF); }

enum class RequestKind : std::uint8_t { demand = 1, prefetch = 2, release_layer = 3 };

// Request (client -> daemon): bits 0..15 layer, 16..39 expert, 40..47 kind, 48..63 zero.
constexpr std::uint64_t encode_request(RequestKind kind, int layer, int expert) noexcept {
  return std::uint64_t(layer & 0xFFFF) | (std::uint64_t(expert & 0xFFFFFF) << 16) | (std::uint64_t(kind) << 40);
}
struct RingRequest {
  RequestKind kind;
  int layer;
  int expert;
};
constexpr RingRequest decode_request(std::uint64_t e) noexcept {
  return RingRequest{RequestKind(std::uint8_t(e >> 40)), int(e & 0xFFFF), int((e >> 16) & 0xFFFFFF)};
}

// Completion error codes (the text is in ClientShm::error_text).
enum class CompletionError : std::uint32_t {
  read_failed = 1,   // the record could not be read or failed validation
  bad_key = 2,       // the container has no such layer (a layer the reader does not hold)
  arena_full = 3,    // every usable slot pinned or in flight
  shutting_down = 4,
};

// Completion (daemon -> client): bits 0..7 layer, 8..31 expert, 32..61 slot index or error code,
// bit 62 "this demand needed a read" (a miss), bit 63 error.
struct Completion {
  int layer;
  int expert;
  bool error;
  bool miss;
  std::uint32_t value;  // slot index, or CompletionError
};
constexpr std::uint64_t encode_completion(const Completion& c) noexcept {
  return std::uint64_t(c.layer & 0xFF) | (std::uint64_t(c.expert & 0xFFFFFF) << 8) |
         (std::uint64_t(c.value & 0x3FFFFFFFu) << 32) | (std::uint64_t(c.miss) << 62) |
         (std::uint64_t(c.error) << 63);
}
constexpr Completion decode_completion(std::uint64_t e) noexcept {
  return Completion{int(e & 0xFF), int((e >> 8) & 0xFFFFFF), bool(e >> 63), bool((e >> 62) & 1),
                    std::uint32_t((e >> 32) & 0x3FFFFFFFu)};
}

// The daemon's verdict on one popped request entry. Anything an honest DaemonExpertSource never
// sends is a breach (the client is detached); see ring.md "Trust boundary".
enum class RequestCheck : std::uint8_t { ok, bad_kind, bad_layer, bad_expert, reserved_bits };

constexpr RequestCheck check_request(std::uint64_t e, int n_layers, int n_experts) noexcept {
  if ((e >> 48) != 0) return RequestCheck::reserved_bits;
  const RingRequest r = decode_request(e);
  if (r.kind != RequestKind::demand && r.kind != RequestKind::prefetch && r.kind != RequestKind::release_layer) {
    return RequestCheck::bad_kind;
  }
  if (r.layer >= n_layers) return RequestCheck::bad_layer;
  // release-layer carries expert 0; demands and prefetches name a real expert.
  if (r.kind == RequestKind::release_layer ? r.expert != 0 : r.expert >= n_experts) return RequestCheck::bad_expert;
  return RequestCheck::ok;
}

constexpr const char* request_check_text(RequestCheck c) noexcept {
  switch (c) {
    case RequestCheck::ok: return "ok";
    case RequestCheck::bad_kind: return "unknown request kind";
    case RequestCheck::bad_layer: return "layer out of range";
    case RequestCheck::bad_expert: return "expert out of range";
    case RequestCheck::reserved_bits: return "reserved bits set";
  }
  return "?";
}

}  // namespace waste::ipc

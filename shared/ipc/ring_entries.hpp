// The 8-byte entries of the request and completion rings, the cache key, and the daemon's check
// of every request it pops. Header-only and free of Result<> so the libFuzzer harness
// (tests/fuzz/fuzz_ring_consumer.cpp, built with clang 14, which lacks std::expected) can use it.
// See docs/design/ring.md for the bit layout.
#pragma once

#include <cstdint>

namespace waste::ipc {

// Limits of the encodings below. IoServer refuses a container beyond them at creation, so no
// layer or expert id is ever truncated silently.
// 8 bits in completions and keys; layer 0xFF is left out: it marks an Engram page completion.
inline constexpr int kMaxLayers = 255;
// 24 bits everywhere; the all-ones id is left out so no key equals SlotIndex's empty marker.
inline constexpr int kMaxExperts = (1 << 24) - 1;

// Cache key of one record: bits 24..31 layer, 0..23 expert.
constexpr std::uint32_t make_key(int layer, int expert) noexcept {
  return (std::uint32_t(layer & 0xFF) << 24) | std::uint32_t(expert & 0xFFFFFF);
}
constexpr int key_layer(std::uint32_t key) noexcept { return int(key >> 24); }
constexpr int key_expert(std::uint32_t key) noexcept { return int(key & 0xFFFFFF); }

enum class RequestKind : std::uint8_t {
  demand = 1,
  prefetch = 2,
  release_layer = 3,
  // Engram pages (encode_engram_request): a demand pins the page until engram_release.
  engram_demand = 4,
  engram_prefetch = 5,
  engram_release = 6,  // unpins every Engram page this client holds (table 0, page 0, tag 0)
};

// Engram tables the daemon serves (8-bit table index) and pages per table (32 bits).
inline constexpr int kMaxEngramTables = 256;
inline constexpr std::uint64_t kMaxEngramPages = std::uint64_t{1} << 32;
// The layer field of an Engram completion (never a real layer: kMaxLayers is 255).
inline constexpr int kEngramCompletionLayer = 0xFF;
// Tags of Engram demands: 16 bits, echoed in the completion (an honest client uses < kRingCapacity).
inline constexpr std::uint32_t kMaxEngramTag = 0xFFFF;

constexpr bool is_engram_kind(RequestKind k) noexcept {
  return k == RequestKind::engram_demand || k == RequestKind::engram_prefetch || k == RequestKind::engram_release;
}

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

// Engram request (client -> daemon): bits 0..31 page, 32..39 table, 40..47 kind, 48..63 tag
// (engram_demand only: the client's handle for the completion; zero for the other two kinds).
constexpr std::uint64_t encode_engram_request(RequestKind kind, int table, std::uint64_t page,
                                              std::uint32_t tag) noexcept {
  return (page & 0xFFFFFFFFull) | (std::uint64_t(table & 0xFF) << 32) | (std::uint64_t(kind) << 40) |
         (std::uint64_t(tag & 0xFFFF) << 48);
}
struct EngramRequest {
  RequestKind kind;
  int table;
  std::uint64_t page;
  std::uint32_t tag;
};
constexpr EngramRequest decode_engram_request(std::uint64_t e) noexcept {
  return EngramRequest{RequestKind(std::uint8_t(e >> 40)), int((e >> 32) & 0xFF), e & 0xFFFFFFFFull,
                       std::uint32_t(e >> 48)};
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

// Engram completion (daemon -> client): bits 0..7 kEngramCompletionLayer, 8..23 the demand's
// tag, 24..31 zero, 32..61 Engram pool slot or error code, 62 miss, 63 error.
struct EngramCompletion {
  std::uint32_t tag;
  bool error;
  bool miss;
  std::uint32_t value;  // pool slot, or CompletionError
};
constexpr std::uint64_t encode_engram_completion(const EngramCompletion& c) noexcept {
  return std::uint64_t(kEngramCompletionLayer) | (std::uint64_t(c.tag & 0xFFFF) << 8) |
         (std::uint64_t(c.value & 0x3FFFFFFFu) << 32) | (std::uint64_t(c.miss) << 62) |
         (std::uint64_t(c.error) << 63);
}
constexpr bool is_engram_completion(std::uint64_t e) noexcept { return (e & 0xFF) == kEngramCompletionLayer; }
constexpr EngramCompletion decode_engram_completion(std::uint64_t e) noexcept {
  return EngramCompletion{std::uint32_t((e >> 8) & 0xFFFF), bool(e >> 63), bool((e >> 62) & 1),
                          std::uint32_t((e >> 32) & 0x3FFFFFFFu)};
}

// The daemon's verdict on one popped request entry. Anything an honest DaemonExpertSource never
// sends is a breach (the client is detached); see ring.md "Trust boundary".
enum class RequestCheck : std::uint8_t {
  ok,
  bad_kind,
  bad_layer,
  bad_expert,
  reserved_bits,
  bad_engram_table,
  bad_engram_page,
};

// Engram kinds are checked against the daemon's tables: `engram_pages[t]` pages in table t for
// t < n_engram_tables (a daemon without tables passes 0 and nullptr: every Engram entry is a
// breach). The tag is the client's own business; release carries table, page and tag 0.
constexpr RequestCheck check_request(std::uint64_t e, int n_layers, int n_experts, int n_engram_tables,
                                     const std::uint64_t* engram_pages) noexcept {
  const RequestKind kind = RequestKind(std::uint8_t(e >> 40));
  if (is_engram_kind(kind)) {
    const EngramRequest r = decode_engram_request(e);
    if (kind == RequestKind::engram_release) {
      return (r.table != 0 || r.page != 0 || r.tag != 0) ? RequestCheck::reserved_bits : RequestCheck::ok;
    }
    if (kind == RequestKind::engram_prefetch && r.tag != 0) return RequestCheck::reserved_bits;
    if (r.table >= n_engram_tables || engram_pages == nullptr) return RequestCheck::bad_engram_table;
    if (r.page >= engram_pages[r.table]) return RequestCheck::bad_engram_page;
    return RequestCheck::ok;
  }
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

// A daemon without Engram tables.
constexpr RequestCheck check_request(std::uint64_t e, int n_layers, int n_experts) noexcept {
  return check_request(e, n_layers, n_experts, 0, nullptr);
}

constexpr const char* request_check_text(RequestCheck c) noexcept {
  switch (c) {
    case RequestCheck::ok: return "ok";
    case RequestCheck::bad_kind: return "unknown request kind";
    case RequestCheck::bad_layer: return "layer out of range";
    case RequestCheck::bad_expert: return "expert out of range";
    case RequestCheck::reserved_bits: return "reserved bits set";
    case RequestCheck::bad_engram_table: return "no such Engram table";
    case RequestCheck::bad_engram_page: return "Engram page beyond its table";
  }
  return "?";
}

}  // namespace waste::ipc

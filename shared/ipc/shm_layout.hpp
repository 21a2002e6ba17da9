// The arena segment of one waste-ioserver instance ("waste_<uid>_<instance>_arena"), byte for byte.
// See docs/design/shm_layout.md for the picture, the writers and the crash recovery.
//
//   [ ControlHeaderShm | SlotShm x n_slots | ClientShm x max_clients | (request, completion)
//     RingShm pairs x max_clients | pad to 4 KiB | arena: n_slots x slot_bytes ]
//
// Only waste-ioserver creates, sizes and initialises the segment. Clients map it open_only and
// write exactly three things: their request ring's entries and tail, their completion ring's head,
// and the doorbells. Everything else they only read. No interprocess mutex anywhere.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "shared/ipc/doorbell.hpp"
#include "shared/ipc/spsc_ring.hpp"
#include "shared/result.hpp"

namespace waste::ipc {

inline constexpr std::uint64_t kArenaMagic = 0x414E524145545357ull;  // "WSTEARNA" little-endian
// Bump whenever any struct in this file, the entry encodings or the region order change:
// a client built against another version refuses to attach instead of misreading.
inline constexpr std::uint32_t kLayoutVersion = 1;
inline constexpr std::uint64_t kSlotAlign = 4096;  // O_DIRECT target alignment
inline constexpr int kMaxClients = 64;             // pin masks are 64-bit

enum class SlotState : std::uint32_t { empty = 0, inflight = 1, ready = 2, failed = 3 };
enum class ClientState : std::uint32_t { free = 0, attached = 1 };

// Cache key of one record, as in the v0 engine.
constexpr std::uint32_t make_key(int layer, int expert) noexcept {
  return (std::uint32_t(layer) << 16) | std::uint32_t(expert & 0xFFFF);
}
constexpr int key_layer(std::uint32_t key) noexcept { return int(key >> 16); }
constexpr int key_expert(std::uint32_t key) noexcept { return int(key & 0xFFFF); }

// ---- header ---------------------------------------------------------------------------------
// Every field is written by the daemon before any client can know the segment's name, except
// the three atomics marked otherwise. Clients read the plain fields freely after validating magic
// and layout_version.
struct ControlHeaderShm {
  std::uint64_t magic;             // kArenaMagic
  std::uint32_t layout_version;    // kLayoutVersion
  std::uint32_t header_bytes;      // sizeof(ControlHeaderShm)
  std::uint64_t total_bytes;       // whole segment
  // Container identity: FNV-1a of the canonical container path, manifest size and mtime, so a
  // client can check it talks to the daemon of the container it opened.
  std::uint64_t container_path_hash;
  std::uint64_t manifest_bytes;
  std::int64_t manifest_mtime_ns;
  std::uint64_t record_bytes;      // bytes of one expert record
  std::uint64_t slot_bytes;        // record_bytes rounded up to kSlotAlign
  std::uint32_t n_slots;
  std::uint32_t max_clients;
  std::uint32_t n_layers;          // keys have layer < n_layers
  std::uint32_t n_experts;         // and expert < n_experts
  std::uint64_t slots_offset;      // SlotShm[n_slots]
  std::uint64_t clients_offset;    // ClientShm[max_clients]
  std::uint64_t rings_offset;      // RingShm[2 * max_clients]: request then completion per client
  std::uint64_t arena_offset;      // 4 KiB aligned
  std::uint64_t trunk_bytes;       // size of the trunk segment image (0: no trunk segment)
  std::int32_t daemon_pid;
  std::uint32_t direct_io;         // 1 when every bank is read with O_DIRECT
  std::uint64_t daemon_start_ticks;  // /proc start time of daemon_pid (pid reuse guard)
  // Written by the daemon service thread at least every 200 ms (relaxed; a liveness signal only).
  alignas(64) std::atomic<std::uint64_t> heartbeat;
  // 1 once the daemon stops (store-release before ringing every completion doorbell).
  std::atomic<std::uint32_t> shutting_down;
  std::uint32_t reserved1;
  // The daemon service thread sleeps here; clients ring it after pushing requests.
  alignas(64) DoorbellShm work;
  std::uint64_t reserved[14];      // room for growth without a version bump
};
static_assert(std::is_standard_layout_v<ControlHeaderShm>, "lives in shared memory");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "heartbeat is read across processes");
static_assert(sizeof(ControlHeaderShm) % 64 == 0, "the slot table starts on a cache line");

// ---- slot table -----------------------------------------------------------------------------
// One per arena slot. Written only by the daemon (under its cache mutex); clients and waste-ctl
// may read it for diagnostics (relaxed: values are advisory outside the daemon).
struct SlotShm {
  std::atomic<std::uint32_t> state;     // SlotState
  std::atomic<std::uint32_t> key;       // make_key(layer, expert); meaningful unless empty
  std::atomic<std::uint64_t> pin_mask;  // bit c: client c holds a pin (demand until release-layer)
  std::atomic<std::uint32_t> hits;      // LFRU frequency
  std::atomic<std::uint32_t> reserved;
  std::atomic<std::uint64_t> last_use;  // cache clock at the last demand access
};
static_assert(sizeof(SlotShm) == 32, "two slot records per cache line");
static_assert(std::is_standard_layout_v<SlotShm>, "lives in shared memory");

// ---- client table ---------------------------------------------------------------------------
inline constexpr int kErrorTextWords = 32;  // 256 bytes of message, 8 bytes per atomic word

struct ClientShm {
  std::atomic<std::uint32_t> state;       // ClientState; daemon only
  std::atomic<std::int32_t> pid;          // daemon only, at attach
  std::atomic<std::uint64_t> generation;  // daemon only: bumped at each attach of this index
  // The daemon writes the reason of its latest error completion here before pushing that
  // completion (relaxed words; the ring's release orders them). A client reads it when it pops
  // an error entry. NUL-terminated, truncated to 255 bytes.
  std::atomic<std::uint64_t> error_text[kErrorTextWords];
  // Per-client counters, daemon only (relaxed; monotonic, reset at attach).
  std::atomic<std::uint64_t> hits;          // demand requests found resident
  std::atomic<std::uint64_t> misses;        // demand requests that needed (or joined) a read
  std::atomic<std::uint64_t> bytes_read;    // record bytes read for this client (demand + prefetch)
  std::atomic<std::uint64_t> prefetch_reads;
  std::uint64_t reserved[2];
};
static_assert(sizeof(ClientShm) % 64 == 0, "client blocks on cache-line boundaries");
static_assert(std::is_standard_layout_v<ClientShm>, "lives in shared memory");

// ---- ring entries ---------------------------------------------------------------------------
enum class RequestKind : std::uint8_t { demand = 1, prefetch = 2, release_layer = 3 };

// Request (client -> daemon): bits 0..15 layer, 16..31 expert, 32..39 kind.
constexpr std::uint64_t encode_request(RequestKind kind, int layer, int expert) noexcept {
  return std::uint64_t(layer & 0xFFFF) | (std::uint64_t(expert & 0xFFFF) << 16) | (std::uint64_t(kind) << 32);
}
struct RingRequest {
  RequestKind kind;
  int layer;
  int expert;
};
constexpr RingRequest decode_request(std::uint64_t e) noexcept {
  return RingRequest{RequestKind(std::uint8_t(e >> 32)), int(e & 0xFFFF), int((e >> 16) & 0xFFFF)};
}

// Completion error codes (the text is in ClientShm::error_text).
enum class CompletionError : std::uint32_t {
  read_failed = 1,   // the record could not be read or failed validation
  bad_key = 2,       // layer or expert out of range
  arena_full = 3,    // every slot pinned or in flight
  shutting_down = 4,
};

// Completion (daemon -> client): bits 0..15 layer, 16..31 expert, 32..61 slot index or error
// code, bit 62 "this demand needed a read" (a miss), bit 63 error.
struct Completion {
  int layer;
  int expert;
  bool error;
  bool miss;
  std::uint32_t value;  // slot index, or CompletionError
};
constexpr std::uint64_t encode_completion(const Completion& c) noexcept {
  return std::uint64_t(c.layer & 0xFFFF) | (std::uint64_t(c.expert & 0xFFFF) << 16) |
         (std::uint64_t(c.value & 0x3FFFFFFFu) << 32) | (std::uint64_t(c.miss) << 62) |
         (std::uint64_t(c.error) << 63);
}
constexpr Completion decode_completion(std::uint64_t e) noexcept {
  return Completion{int(e & 0xFFFF), int((e >> 16) & 0xFFFF), bool(e >> 63), bool((e >> 62) & 1),
                    std::uint32_t((e >> 32) & 0x3FFFFFFFu)};
}

// ---- geometry -------------------------------------------------------------------------------
struct ArenaLayout {
  std::uint64_t slots_offset = 0, clients_offset = 0, rings_offset = 0, arena_offset = 0;
  std::uint64_t slot_bytes = 0, total_bytes = 0;
  static ArenaLayout compute(std::uint64_t record_bytes, std::uint32_t n_slots, std::uint32_t max_clients) noexcept;
};

// Typed access to a mapped arena segment (either side). Holds no ownership.
class ArenaView {
 public:
  ArenaView() = default;
  // Checks magic, layout version and that the mapping covers total_bytes.
  static Result<ArenaView> attach(std::span<std::byte> mapping, const std::string& segment_name);
  explicit ArenaView(std::byte* base) noexcept : base_(base) {}

  [[nodiscard]] ControlHeaderShm& header() const noexcept { return *reinterpret_cast<ControlHeaderShm*>(base_); }
  [[nodiscard]] SlotShm& slot(std::uint32_t i) const noexcept {
    return reinterpret_cast<SlotShm*>(base_ + header().slots_offset)[i];
  }
  [[nodiscard]] ClientShm& client(int c) const noexcept {
    return reinterpret_cast<ClientShm*>(base_ + header().clients_offset)[c];
  }
  [[nodiscard]] RingShm& request_ring(int c) const noexcept {
    return reinterpret_cast<RingShm*>(base_ + header().rings_offset)[2 * c];
  }
  [[nodiscard]] RingShm& completion_ring(int c) const noexcept {
    return reinterpret_cast<RingShm*>(base_ + header().rings_offset)[2 * c + 1];
  }
  [[nodiscard]] std::byte* slot_data(std::uint32_t i) const noexcept {
    return base_ + header().arena_offset + std::uint64_t(i) * header().slot_bytes;
  }
  [[nodiscard]] std::byte* base() const noexcept { return base_; }

 private:
  std::byte* base_ = nullptr;
};

// Error text helpers (daemon writes, client reads).
void write_error_text(ClientShm& client, std::string_view text) noexcept;
std::string read_error_text(const ClientShm& client);

// FNV-1a 64 over bytes, for the container identity.
std::uint64_t fnv1a64(std::string_view bytes) noexcept;

}  // namespace waste::ipc

// The segments of one waste-ioserver instance, byte for byte. See docs/design/shm_layout.md for the
// picture, the writers and the crash recovery.
//
//   arena  "waste_<uid>_<instance>_arena", clients map it READ-ONLY:
//     [ ControlHeaderShm | SlotShm x n_slots | ClientShm x max_clients |
//       FileIdentityShm x n_identity_files | EngramTableShm x n_engram_tables | pad to 4 KiB |
//       arena: n_slots x slot_bytes | Engram pool: n_engram_pages x 4 KiB ]
//   rings  "waste_<uid>_<instance>_c<idx>_g<gen>", one per lease, created at attach, removed at
//          detach/reclaim; only that client and the daemon map it (read-write):
//     [ RingSegmentHeaderShm | request RingShm | completion RingShm ]
//   wake   "waste_<uid>_<instance>_wake": the daemon's doorbell, rung by every client (read-write).
//
// Only waste-ioserver creates, sizes and initialises segments, and it never reads an offset, size
// or count back from them: it keeps its own ArenaLayout. What a client can write (its rings, the
// wake doorbell) is checked on every read (spsc_ring.hpp, ring_entries.hpp). No interprocess mutex.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "shared/ipc/doorbell.hpp"
#include "shared/ipc/ring_entries.hpp"
#include "shared/ipc/spsc_ring.hpp"
#include "shared/result.hpp"

namespace waste::ipc {

inline constexpr std::uint64_t kArenaMagic = 0x414E524145545357ull;  // "WSTEARNA" little-endian
// Bump whenever any struct in this file, the entry encodings or the region order change:
// a client built against another version refuses to attach instead of misreading.
inline constexpr std::uint32_t kLayoutVersion = 3;
inline constexpr std::uint64_t kRingsMagic = 0x53474E4945545357ull;  // "WSTEINGS"
inline constexpr std::uint64_t kWakeMagic = 0x454B415745545357ull;   // "WSTEWAKE"
inline constexpr std::uint64_t kSlotAlign = 4096;  // O_DIRECT target alignment
inline constexpr int kMaxClients = 64;             // pin masks are 64-bit
inline constexpr std::uint64_t kEngramPageBytes = 4096;  // one Engram pool slot: one table page

enum class SlotState : std::uint32_t { empty = 0, inflight = 1, ready = 2, failed = 3 };
enum class ClientState : std::uint32_t { free = 0, attached = 1 };

// ---- header ---------------------------------------------------------------------------------
// Every field is written by the daemon before any client can know the segment's name, except
// the atomics marked otherwise. Clients read the plain fields freely after validating magic and
// layout_version (ArenaView::attach also recomputes the offsets from the counts).
struct ControlHeaderShm {
  std::uint64_t magic;             // kArenaMagic
  std::uint32_t layout_version;    // kLayoutVersion
  std::uint32_t header_bytes;      // sizeof(ControlHeaderShm)
  std::uint64_t total_bytes;       // whole segment (before rounding to the file system's block)
  // Container identity: FNV-1a of the canonical container path, and one FileIdentityShm per file
  // (manifest, trunk, codebooks, banks) at identity_offset; a client compares them at open.
  std::uint64_t container_path_hash;
  std::uint32_t n_identity_files;
  std::uint32_t reserved0;
  std::uint64_t record_bytes;      // bytes of one expert record
  std::uint64_t slot_bytes;        // record_bytes rounded up to kSlotAlign
  std::uint32_t n_slots;
  std::uint32_t max_clients;
  std::uint32_t n_layers;          // keys have layer < n_layers
  std::uint32_t n_experts;         // and expert < n_experts
  std::uint64_t slots_offset;      // SlotShm[n_slots]
  std::uint64_t clients_offset;    // ClientShm[max_clients]
  std::uint64_t identity_offset;   // FileIdentityShm[n_identity_files]
  std::uint64_t arena_offset;      // 4 KiB aligned
  std::uint64_t trunk_bytes;       // size of the trunk segment image (0: no trunk segment)
  std::int32_t daemon_pid;
  std::uint32_t direct_io;         // 1 when every bank is read with O_DIRECT
  std::uint64_t daemon_start_ticks;  // /proc start time of daemon_pid (pid reuse guard)
  // Written by the daemon service thread at least every 200 ms (relaxed; a liveness signal only).
  alignas(64) std::atomic<std::uint64_t> heartbeat;
  // 1 once the daemon stops (store-release before ringing every completion doorbell).
  std::atomic<std::uint32_t> shutting_down;
  // Slots that may hold records now (IoServer::set_cache_slots; relaxed, advisory for clients).
  std::atomic<std::uint32_t> usable_slots;
  // Engram tables (EngramTableShm[n_engram_tables] at engram_tables_offset) and the Engram page
  // pool (n_engram_pages slots of kEngramPageBytes at engram_pages_offset). Written at creation.
  std::uint64_t engram_tables_offset;
  std::uint64_t engram_pages_offset;
  std::uint32_t n_engram_tables;
  std::uint32_t n_engram_pages;
  std::uint64_t reserved[11];      // room for growth without a version bump
};
static_assert(std::is_standard_layout_v<ControlHeaderShm>, "lives in shared memory");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "heartbeat is read across processes");
static_assert(sizeof(ControlHeaderShm) % 64 == 0, "the slot table starts on a cache line");

// One file of the container as the daemon opened it. name_hash: FNV-1a of the file name.
struct FileIdentityShm {
  std::uint64_t name_hash;
  std::uint64_t inode;
  std::uint64_t device;
  std::uint64_t size;
  std::int64_t mtime_ns;
  std::uint64_t reserved[3];
};
static_assert(sizeof(FileIdentityShm) == 64, "one cache line per file");

// One Engram table the daemon serves (engram-L{layer}.bin, its header checked at open). The
// geometry is written at creation; the counters by the daemon (relaxed, monotonic; for
// diagnostics: `stats` reads the daemon's own copies).
struct EngramTableShm {
  std::uint32_t layer;          // the decoder layer the table feeds
  std::uint32_t bits;           // 4 or 8
  std::uint64_t rows;
  std::uint32_t width;          // columns of a row
  std::uint32_t row_bytes;
  std::uint32_t rows_per_page;  // no row crosses a page
  std::uint32_t page_bytes;     // kEngramPageBytes (the daemon serves no wider rows)
  std::uint64_t pages;          // data pages: demands name page < pages
  std::atomic<std::uint64_t> hits;        // demands that found the page resident
  std::atomic<std::uint64_t> misses;      // demands that needed (or joined) a read
  std::atomic<std::uint64_t> bytes_read;  // page bytes read from the file (demand + prefetch)
};
static_assert(sizeof(EngramTableShm) == 64, "one cache line per table");
static_assert(std::is_standard_layout_v<EngramTableShm>, "lives in shared memory");

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
  std::atomic<std::uint32_t> state;       // ClientState; daemon only (release after the rings exist)
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
  std::atomic<std::uint64_t> breaches;      // times this index was detached for a protocol breach
  std::uint64_t reserved[1];
};
static_assert(sizeof(ClientShm) % 64 == 0, "client blocks on cache-line boundaries");
static_assert(std::is_standard_layout_v<ClientShm>, "lives in shared memory");

// ---- ring segment (one per lease) ----------------------------------------------------------
// Written by the daemon at attach before the name is handed out; the client checks magic, index
// and generation. The daemon never reads it back.
struct RingSegmentHeaderShm {
  std::uint64_t magic;           // kRingsMagic
  std::uint32_t layout_version;  // kLayoutVersion
  std::int32_t client_idx;
  std::uint64_t generation;
  std::uint64_t reserved[5];
};
static_assert(sizeof(RingSegmentHeaderShm) == 64, "rings start on a cache line");

struct RingSegmentShm {
  RingSegmentHeaderShm header;
  RingShm request;     // producer: the client; consumer: the daemon service thread
  RingShm completion;  // producer: the daemon (cache mutex held); consumer: the client
};
static_assert(std::is_standard_layout_v<RingSegmentShm>, "lives in shared memory");

// ---- wake segment ---------------------------------------------------------------------------
// The daemon service thread sleeps on `work`; clients ring it after pushing requests. Any client
// may scribble here: that costs at worst a spurious wake-up or one sleep of the service thread's
// timeout (100 ms), never a wrong read, because the daemon only uses it as a futex word.
struct WakeShm {
  std::uint64_t magic;           // kWakeMagic (daemon, at creation)
  std::uint32_t layout_version;
  std::uint32_t reserved0;
  alignas(64) DoorbellShm work;
};
static_assert(std::is_standard_layout_v<WakeShm>, "lives in shared memory");

// ---- geometry -------------------------------------------------------------------------------
// The daemon computes this once and addresses everything from its own copy.
struct ArenaLayout {
  std::uint64_t slots_offset = 0, clients_offset = 0, identity_offset = 0, engram_tables_offset = 0, arena_offset = 0;
  std::uint64_t engram_pages_offset = 0;
  std::uint64_t record_bytes = 0, slot_bytes = 0, total_bytes = 0;
  std::uint32_t n_slots = 0, max_clients = 0, n_identity_files = 0, n_engram_tables = 0, n_engram_pages = 0;
  static ArenaLayout compute(std::uint64_t record_bytes, std::uint32_t n_slots, std::uint32_t max_clients,
                             std::uint32_t n_identity_files = 0, std::uint32_t n_engram_tables = 0,
                             std::uint32_t n_engram_pages = 0) noexcept;
};

// Typed access to a mapped arena segment (either side), addressed from an ArenaLayout the holder
// trusts: the daemon's own, or on a client the one recomputed by attach(). Holds no ownership.
class ArenaView {
 public:
  ArenaView() = default;
  // Client side: checks magic and layout version, recomputes the layout from the counts and
  // checks it against the header's offsets and the mapping's size.
  static Result<ArenaView> attach(std::span<const std::byte> mapping, const std::string& segment_name);
  ArenaView(std::byte* base, const ArenaLayout& layout) noexcept : base_(base), layout_(layout) {}

  [[nodiscard]] ControlHeaderShm& header() const noexcept { return *reinterpret_cast<ControlHeaderShm*>(base_); }
  [[nodiscard]] SlotShm& slot(std::uint32_t i) const noexcept {
    return reinterpret_cast<SlotShm*>(base_ + layout_.slots_offset)[i];
  }
  [[nodiscard]] ClientShm& client(int c) const noexcept {
    return reinterpret_cast<ClientShm*>(base_ + layout_.clients_offset)[c];
  }
  [[nodiscard]] FileIdentityShm& identity(std::uint32_t i) const noexcept {
    return reinterpret_cast<FileIdentityShm*>(base_ + layout_.identity_offset)[i];
  }
  [[nodiscard]] EngramTableShm& engram_table(std::uint32_t t) const noexcept {
    return reinterpret_cast<EngramTableShm*>(base_ + layout_.engram_tables_offset)[t];
  }
  [[nodiscard]] std::byte* engram_page(std::uint32_t i) const noexcept {
    return base_ + layout_.engram_pages_offset + std::uint64_t(i) * kEngramPageBytes;
  }
  [[nodiscard]] std::byte* slot_data(std::uint32_t i) const noexcept {
    return base_ + layout_.arena_offset + std::uint64_t(i) * layout_.slot_bytes;
  }
  [[nodiscard]] std::byte* base() const noexcept { return base_; }
  [[nodiscard]] const ArenaLayout& layout() const noexcept { return layout_; }

 private:
  std::byte* base_ = nullptr;
  ArenaLayout layout_;
};

// Client side: checks a mapped ring segment's header against the lease.
Status check_ring_segment(std::span<const std::byte> mapping, const std::string& segment_name, int client_idx,
                          std::uint64_t generation);
Status check_wake_segment(std::span<const std::byte> mapping, const std::string& segment_name);

// Error text helpers (daemon writes, client reads).
void write_error_text(ClientShm& client, std::string_view text) noexcept;
std::string read_error_text(const ClientShm& client);

// FNV-1a 64 over bytes, for the container identity.
std::uint64_t fnv1a64(std::string_view bytes) noexcept;

}  // namespace waste::ipc

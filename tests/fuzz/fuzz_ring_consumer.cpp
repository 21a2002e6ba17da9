// libFuzzer harness: the daemon's own request service fed a hostile client's ring. Each input
// builds an in-process IoServer (private memory, an in-memory record reader, one reader thread)
// and attaches one client; the input is then what that client writes into its ring segment, in
// rounds: request entries (well-formed ones and raw words), a tail of its choosing, scribbles
// on the daemon-owned request head and on the completion ring's head. After each round the
// harness rings the daemon's doorbell and waits until the service thread
// (IoServer::Impl::drain, the code waste-ioserver runs) has taken everything it will take, then
// reads the completions the way DaemonExpertSource does. Invariants (a violation traps):
//   - the daemon drains every round within 5 s (no hang, whatever the ring holds);
//   - it detaches the client exactly when the ring breaks the protocol (a tail behind its head
//     or more than a ring ahead, an entry check_request refuses, or a completion ring it cannot
//     push to), and the client's block then says why with the exact text;
//   - each completion names a real record; a served one points at a slot holding that record's
//     bytes; an error one carries a known code; no more completions than demands.
// The daemon also serves one Engram table (engram-L1.bin, 9 pages, written once into a temp dir)
// with a pool of 1..4 pages: Engram demands, prefetches and releases (and ones naming page 9 or
// table 1, which are breaches) go through the same checks; an Engram completion names a pool slot
// holding one whole page of the table, or arena_full.
// Build: scripts/fuzz.sh (links waste_ioserver_lib); corpus: corpus/fuzz_ring_consumer/.
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ioserver/io_server.hpp"
#include "ioserver/nvme/record_reader.hpp"
#include "shared/container/engram_table.hpp"
#include "shared/crc32.hpp"
#include "shared/ipc/doorbell.hpp"
#include "shared/ipc/ring_entries.hpp"
#include "shared/ipc/shm_layout.hpp"
#include "shared/ipc/spsc_ring.hpp"

namespace {

using namespace waste;
using namespace waste::ipc;

#define WASTE_FUZZ_CHECK(cond)       \
  do {                               \
    if (!(cond)) __builtin_trap();   \
  } while (0)

constexpr std::uint64_t kRecordBytes = 4096;

std::byte pattern_byte(int layer, int expert, std::size_t i) {
  return std::byte(std::uint8_t(layer * 37 + expert * 11 + i * 7 + 1));
}

// Records in memory; `hole` is a layer the container does not hold (a dense layer: no experts).
class MemoryReader : public RecordReader {
 public:
  MemoryReader(int n_layers, int n_experts, int hole) : n_layers_(n_layers), n_experts_(n_experts), hole_(hole) {}
  Status read(int layer, int expert, std::span<std::byte> buffer) const override {
    for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = pattern_byte(layer, expert, i);
    return ok();
  }
  std::uint64_t record_bytes() const override { return kRecordBytes; }
  bool direct_io_engaged() const override { return false; }
  int n_layers() const override { return n_layers_; }
  int n_experts() const override { return n_experts_; }
  bool has_layer(int layer) const override { return layer >= 0 && layer < n_layers_ && layer != hole_; }

 private:
  int n_layers_, n_experts_, hole_;
};

// One Engram table of kEngramPages data pages; byte i of page p is engram_byte(p, i).
constexpr std::uint64_t kEngramPages = 9;
std::uint8_t engram_byte(std::uint64_t page, std::size_t i) { return std::uint8_t(page * 31 + i * 7 + 3); }

// Written once per process (removed at exit): the daemon checks the header (and its CRC) and the
// size at creation.
struct TempEngramDir {
  std::filesystem::path path;
  ~TempEngramDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
const std::filesystem::path& engram_dir() {
  static const TempEngramDir dir{[] {
    const auto d = std::filesystem::temp_directory_path() / ("waste-fuzz-engram-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::vector<std::byte> data(kEngramPages * kEngramPage);
    for (std::uint64_t p = 0; p < kEngramPages; ++p) {
      for (std::size_t i = 0; i < kEngramPage; ++i) data[p * kEngramPage + i] = std::byte(engram_byte(p, i));
    }
    EngramTableHeader h;
    h.bits = 8;
    h.width = 32;  // 34-byte rows, 120 a page
    h.rows = kEngramPages * h.rows_per_page();
    h.layer = 1;
    h.data_crc = crc32(data);
    const auto head = encode_engram_header(h);
    std::ofstream out(d / "engram-L1.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(head.data()), std::streamsize(head.size()));
    out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
    return d;
  }()};
  return dir.path;
}

struct Input {
  const std::uint8_t* p;
  std::size_t n;
  template <class T>
  bool take(T& out) {
    if (n < sizeof(T)) return false;
    std::memcpy(&out, p, sizeof(T));
    p += sizeof(T);
    n -= sizeof(T);
    return true;
  }
};

struct Fixture {
  std::unique_ptr<IoServer> server;
  ClientLease lease;
  RingSegmentShm* rings = nullptr;
  WakeShm* wake = nullptr;
  ArenaView view;
  int n_layers = 0, n_experts = 0;
};

bool attached(const Fixture& f) {
  const auto who = f.server->occupant(f.lease.client_idx);
  return who && who->generation == f.lease.generation;
}

// Ring the daemon and wait until its service thread has taken what it will take from the ring
// and every read it started has landed: the client is detached, or its queue is empty.
void settle(const Fixture& f) {
  ring_doorbell(f.wake->work);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    const IoStats st = f.server->stats();
    bool drained = true;
    for (const auto& c : st.clients) {
      if (c.client_idx == f.lease.client_idx && c.request_queue_depth != 0) drained = false;
    }
    if (drained && st.read_queue_depth == 0 && st.engram_queue_depth == 0) return;
    WASTE_FUZZ_CHECK(std::chrono::steady_clock::now() < deadline);  // the daemon hangs on this ring
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in{data, size};
  std::uint8_t shape[3] = {};
  if (!in.take(shape)) return 0;
  Fixture f;
  f.n_layers = 1 + shape[0] % 4;
  f.n_experts = 1 + shape[1] % 16;
  const int hole = shape[0] / 4 % 8 < f.n_layers ? shape[0] / 4 % 8 : -1;

  IoServerConfig config;
  config.instance = "fuzz";
  config.arena_slots = 1 + shape[2] % 8;
  config.reader_threads = 1;
  config.direct_io = false;
  config.max_clients = 2;
  config.arena_wait = std::chrono::milliseconds(20);
  config.populate_arena = false;
  config.private_memory = true;
  config.engram_pool_pages = 1 + shape[2] / 8 % 4;
  IoServer::Parts parts;
  parts.reader = std::make_unique<MemoryReader>(f.n_layers, f.n_experts, hole);
  parts.engram_dir = engram_dir();
  auto server = IoServer::create(config, std::move(parts));
  WASTE_FUZZ_CHECK(server.has_value());
  f.server = std::move(*server);
  auto lease = f.server->attach(int(::getpid()));
  WASTE_FUZZ_CHECK(lease.has_value() && lease->mappings);
  f.lease = *lease;
  f.rings = reinterpret_cast<RingSegmentShm*>(f.lease.mappings->rings.data());
  f.wake = reinterpret_cast<WakeShm*>(f.lease.mappings->wake.data());
  auto view = ArenaView::attach(f.lease.mappings->arena, "fuzz");
  WASTE_FUZZ_CHECK(view.has_value());
  f.view = *view;
  const std::uint32_t n_slots = f.view.layout().n_slots;
  const std::uint32_t n_pool = f.view.layout().n_engram_pages;
  WASTE_FUZZ_CHECK(f.view.layout().n_engram_tables == 1 && f.view.engram_table(0).pages == kEngramPages);
  const std::uint64_t engram_pages[1] = {kEngramPages};

  RingConsumer completions(f.rings->completion);  // the client's side, as DaemonExpertSource holds it
  std::uint64_t head = 0;                          // where the daemon's consumer stands
  std::uint64_t demands = 0, answered = 0;
  bool completion_scribbled = false;
  const std::string who = "client " + std::to_string(f.lease.client_idx) + " (pid " + std::to_string(::getpid()) +
                          ", lease " + std::to_string(f.lease.generation) + ") broke the ring protocol: ";

  for (int round = 0; round < 64 && attached(f); ++round) {
    std::uint8_t count = 0, flags = 0;
    if (!in.take(count) || !in.take(flags)) break;
    std::uint64_t tail = head;
    for (int k = 0; k < count; ++k) {
      std::uint32_t word = 0;
      if (!in.take(word)) break;
      std::uint64_t entry = 0;
      if (word >> 31) {  // a raw word: reserved bits, unknown kinds, any layer or expert
        std::uint32_t high = 0;
        if (!in.take(high)) break;
        entry = (std::uint64_t(high) << 32 | word) & ~(std::uint64_t(1) << 31);
      } else {  // a request an honest client could send (layer and expert one past the end at most)
        const auto kind = RequestKind(1 + word % 6);
        if (is_engram_kind(kind)) {  // table 0 or 1 (unknown), page up to one past the end
          const bool release = kind == RequestKind::engram_release;
          const int table = release ? 0 : int(word >> 3 & 0xFF) % 2 * int(word >> 11 & 1);
          const std::uint64_t page = release ? 0 : (word >> 12 & 0xFF) % (kEngramPages + 1);
          const std::uint32_t tag = kind == RequestKind::engram_demand ? (word >> 20 & 0x3FF) : 0;
          entry = encode_engram_request(kind, table, page, tag);
        } else {
          const int layer = int(word >> 3 & 0xFF) % (f.n_layers + 1);
          const int expert = kind == RequestKind::release_layer ? 0 : int(word >> 11 & 0xFFFF) % (f.n_experts + 1);
          entry = encode_request(kind, layer, expert);
        }
      }
      f.rings->request.entries[tail & (kRingCapacity - 1)].store(entry, std::memory_order_relaxed);
      ++tail;
    }
    if (flags & 1) {  // the client sets its tail to anything
      std::uint64_t t = 0;
      if (!in.take(t)) break;
      tail = flags & 2 ? t : head + (t & 0x7FF);
    }
    if (flags & 4) {  // the daemon-owned request head, scribbled: the daemon must not care
      std::uint64_t h = 0;
      if (!in.take(h)) break;
      f.rings->request.head.store(h, std::memory_order_relaxed);
    }
    if (flags & 8) {  // the completion ring's head, scribbled: the daemon's next push must notice
      std::uint64_t h = 0;
      if (!in.take(h)) break;
      f.rings->completion.head.store(h, std::memory_order_release);
      completion_scribbled = true;
    }

    // What the daemon must make of the request side: the first problem it meets, if any, and
    // the demands it serves before that.
    std::string expected;
    std::uint64_t round_demands = 0;
    if (tail < head || tail - head > kRingCapacity) {
      expected = "request ring tail " + std::to_string(tail) + " against head " + std::to_string(head) + " (capacity " +
                 std::to_string(kRingCapacity) + ")";
    } else {
      for (std::uint64_t i = head; i < tail; ++i) {
        const std::uint64_t entry = f.rings->request.entries[i & (kRingCapacity - 1)].load(std::memory_order_relaxed);
        const RequestCheck check = check_request(entry, f.n_layers, f.n_experts, 1, engram_pages);
        if (check == RequestCheck::ok) {
          const auto kind = RequestKind(std::uint8_t(entry >> 40));
          if (kind == RequestKind::demand || kind == RequestKind::engram_demand) ++round_demands;
          continue;
        }
        char hex[32];
        std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(entry));
        expected = std::string("request entry ") + hex + ": " + request_check_text(check) + " (" +
                   std::to_string(f.n_layers) + " layers x " + std::to_string(f.n_experts) +
                   " experts, 1 Engram tables)";
        break;
      }
    }
    const std::uint64_t outstanding = demands - answered + round_demands;
    demands += round_demands;
    f.rings->request.tail.store(tail, std::memory_order_release);
    settle(f);

    const bool still = attached(f);
    // Answers fill the completion ring only with more than kRingCapacity - 1 demands outstanding.
    const bool may_fill = outstanding >= kRingCapacity - 1;
    if (!expected.empty()) {
      WASTE_FUZZ_CHECK(!still);
    } else if (!completion_scribbled && !may_fill) {
      WASTE_FUZZ_CHECK(still);
    }
    if (!still) {
      const std::string text = read_error_text(f.view.client(f.lease.client_idx));
      WASTE_FUZZ_CHECK(text.starts_with(who.substr(0, text.size())) && text.size() >= std::min<std::size_t>(who.size(), 200));
      if (!completion_scribbled && !may_fill) {
        const std::string full = who + expected + "; detached";
        WASTE_FUZZ_CHECK(text == full.substr(0, text.size()));
      }
      break;
    }
    head = tail;

    // The client's side: every completion names a real record; a served one, its bytes.
    while (auto e = completions.try_pop()) {
      ++answered;
      if (is_engram_completion(*e)) {
        const EngramCompletion c = decode_engram_completion(*e);
        WASTE_FUZZ_CHECK(c.tag < 0x400);
        if (c.error) {
          WASTE_FUZZ_CHECK(c.value == std::uint32_t(CompletionError::arena_full));
          continue;
        }
        WASTE_FUZZ_CHECK(c.value < n_pool);
        // Every read has landed (settle): the slot holds one whole page of the table.
        const auto* bytes = reinterpret_cast<const std::uint8_t*>(f.view.engram_page(c.value));
        const std::uint8_t page31 = std::uint8_t(bytes[0] - 3);
        for (std::size_t i = 0; i < kEngramPage; i += 89) {
          WASTE_FUZZ_CHECK(bytes[i] == std::uint8_t(page31 + i * 7 + 3));
        }
        continue;
      }
      const Completion c = decode_completion(*e);
      WASTE_FUZZ_CHECK(c.layer >= 0 && c.layer < f.n_layers && c.expert >= 0 && c.expert < f.n_experts);
      if (c.error) {
        WASTE_FUZZ_CHECK(c.value == std::uint32_t(CompletionError::bad_key) ||
                         c.value == std::uint32_t(CompletionError::arena_full));
        WASTE_FUZZ_CHECK((c.value == std::uint32_t(CompletionError::bad_key)) == (c.layer == hole));
        continue;
      }
      WASTE_FUZZ_CHECK(c.layer != hole && c.value < n_slots);
      const SlotShm& slot = f.view.slot(c.value);
      if (slot.key.load(std::memory_order_acquire) != make_key(c.layer, c.expert) ||
          slot.state.load(std::memory_order_acquire) != std::uint32_t(SlotState::ready)) {
        continue;  // released and reused since (a release-layer later in the same round)
      }
      const std::byte* bytes = f.view.slot_data(c.value);
      for (std::size_t i = 0; i < kRecordBytes; i += 97) WASTE_FUZZ_CHECK(bytes[i] == pattern_byte(c.layer, c.expert, i));
    }
    if (!completion_scribbled) WASTE_FUZZ_CHECK(answered <= demands);
  }
  if (attached(f)) WASTE_FUZZ_CHECK(f.server->detach(f.lease.client_idx, f.lease.pid, f.lease.generation).has_value());
  return 0;
}

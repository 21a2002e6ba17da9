// The background fill (IoServerConfig::fill, ioserver/data_plane/fill.cpp): with slots for every
// record, a server nobody asks anything reads the whole container into its arena; with fewer
// usable slots, or the fill off, it reads nothing; a demand during the fill is served with the
// right bytes and the record is not read twice.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <set>
#include <thread>

#include <catch2/catch.hpp>

#include "compute/io/daemon_expert_source.hpp"
#include "shared/container/container.hpp"
#include "shared/container/manifest.hpp"
#include "shared/ipc/ring_entries.hpp"
#include "shared/ipc/segment_names.hpp"
#include "shared/ipc/shm_layout.hpp"
#include "shared/ipc/shm_segment.hpp"
#include "test_support.hpp"

using namespace waste;
using test::eventually;
using namespace std::chrono_literals;

namespace {

// Records of the synthetic container, from its manifest: one per expert of every MoE bank.
std::uint64_t records_of(const std::filesystem::path& dir) {
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  std::uint64_t n = 0;
  for (const auto& [layer, bank] : info->manifest.banks) n += std::uint64_t(bank.experts);
  return n;
}

IoServerConfig fill_config(const std::string& what, std::uint64_t slots, bool fill) {
  IoServerConfig config;
  config.container = test::synth_container();
  config.instance = test::unique_instance(what);
  config.arena_slots = slots;
  config.fill = fill;
  return config;
}

}  // namespace

TEST_CASE("fill: slots for every record and no client: every record becomes resident, bytes as on disk",
          "[ioserver][fill]") {
  const auto dir = test::synth_container();
  const std::uint64_t records = records_of(dir);
  REQUIRE(records == 3 * 8);  // tiny: MoE layers 1..3, 8 experts each
  auto server = IoServer::create(fill_config("fill-all", records, true));
  if (!server) FAIL(server.error().message);
  REQUIRE(eventually([&] { return (*server)->stats().fill_state == "done"; }, 20000ms));
  const IoStats st = (*server)->stats();
  CHECK(st.fill_total == records);
  CHECK(st.fill_records == records);
  CHECK(st.fill_bytes == records * st.record_bytes);
  CHECK(st.slots_used == records);
  CHECK(st.reads == 0);        // nobody asked: the clients' counters are untouched
  CHECK(st.bytes_read == 0);
  CHECK(st.evictions == 0);
  CHECK(st.read_errors == 0);
  CHECK(stats_json(st)["totals"]["fill_records"].get<std::uint64_t>() == records);
  CHECK(stats_json(st)["totals"]["fill"].get<std::string>() == "done");

  // Every slot holds a distinct record, ready and unpinned, byte for byte the bank's.
  auto arena = ipc::ShmSegment::open(ipc::kDefaultShmDir, (*server)->segment_name(), false);
  REQUIRE(arena);
  auto view = ipc::ArenaView::attach(arena->bytes(), (*server)->segment_name());
  REQUIRE(view);
  std::set<std::uint32_t> keys;
  for (std::uint32_t s = 0; s < records; ++s) {
    const ipc::SlotShm& slot = view->slot(s);
    REQUIRE(slot.state.load() == std::uint32_t(ipc::SlotState::ready));
    CHECK(slot.pin_mask.load() == 0);
    const std::uint32_t key = slot.key.load();
    keys.insert(key);
    const int layer = ipc::key_layer(key), expert = ipc::key_expert(key);
    const auto oracle = test::pread_record(dir, layer, expert, st.record_bytes);
    REQUIRE(oracle.size() == st.record_bytes);
    INFO("slot " << s << ": expert " << expert << " of layer " << layer);
    CHECK(std::memcmp(view->slot_data(s), oracle.data(), oracle.size()) == 0);
  }
  CHECK(keys.size() == records);

  // A later demand is a hit: no read.
  auto lease = (*server)->attach(::getpid());
  REQUIRE(lease);
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  auto source = DaemonExpertSource::open(*lease, info->geometry);
  REQUIRE(source);
  const std::vector<int> ids = {0, 5};
  REQUIRE((*source)->request(2, ids));
  for (int e : ids) {
    auto bytes = (*source)->acquire_bytes(2, e);
    REQUIRE(bytes);
    const auto oracle = test::pread_record(dir, 2, e, st.record_bytes);
    CHECK(std::memcmp(bytes->data(), oracle.data(), oracle.size()) == 0);
  }
  (*source)->release_layer(2);
  const IoStats after = (*server)->stats();
  CHECK(after.hits == 2);
  CHECK(after.misses == 0);
  CHECK(after.reads == 0);
}

TEST_CASE("fill: an arena one slot short of every record reads nothing", "[ioserver][fill]") {
  const std::uint64_t records = records_of(test::synth_container());
  auto server = IoServer::create(fill_config("fill-short", records - 1, true));
  if (!server) FAIL(server.error().message);
  // Some service-loop rounds (each bounded by its 100 ms sleep) with a cache one slot short.
  std::this_thread::sleep_for(400ms);
  const IoStats st = (*server)->stats();
  CHECK(st.fill_state == "waiting");
  CHECK(st.fill_total == records);
  CHECK(st.fill_records == 0);
  CHECK(st.slots_used == 0);
  CHECK(st.read_queue_depth == 0);
}

TEST_CASE("fill: off reads nothing", "[ioserver][fill]") {
  const std::uint64_t records = records_of(test::synth_container());
  auto server = IoServer::create(fill_config("fill-off", records, false));
  if (!server) FAIL(server.error().message);
  std::this_thread::sleep_for(400ms);
  const IoStats st = (*server)->stats();
  CHECK(st.fill_state == "off");
  CHECK(st.fill_records == 0);
  CHECK(st.slots_used == 0);
  CHECK(stats_json(st)["totals"]["fill"].get<std::string>() == "off");
}

TEST_CASE("fill: a demand during the fill waits behind one fill read at most and gets the right bytes",
          "[ioserver][fill]") {
  constexpr std::uint64_t kRecordBytes = 8192;
  auto reader = std::make_unique<test::PatternReader>(4, 8, kRecordBytes);
  test::PatternReader& pattern = *reader;
  pattern.set_gate(true);  // every read waits until the gate opens
  auto config = test::pattern_config("fill-demand", 32);
  config.fill = true;
  config.reader_threads = 1;
  auto server = IoServer::create(config, std::move(reader));
  if (!server) FAIL(server.error().message);
  // The fill's first read (expert 0 of layer 0) is under way, and it is the only one.
  REQUIRE(eventually([&] { return pattern.total_reads() == 1; }, 5000ms));
  CHECK(pattern.reads_of(0, 0) == 1);
  CHECK((*server)->stats().read_queue_depth == 1);

  auto open_client = [&] {
    auto lease = (*server)->attach(::getpid());
    REQUIRE(lease);
    auto source = DaemonExpertSource::open(*lease, ExpertGeometry{});
    REQUIRE(source);
    return std::move(*source);
  };
  auto a = open_client();
  auto b = open_client();
  // a wants a record nobody is reading (queued behind the fill read), b the one being filled.
  auto wanted = std::async(std::launch::async, [&] {
    auto bytes = a->acquire_bytes(3, 7);
    return bytes && test::exact(*bytes, 3, 7) && bytes->size() == kRecordBytes;
  });
  auto joined = std::async(std::launch::async, [&] {
    auto bytes = b->acquire_bytes(0, 0);
    return bytes && test::exact(*bytes, 0, 0) && bytes->size() == kRecordBytes;
  });
  // The demand's read is queued behind the fill read; no second fill read is queued with them.
  REQUIRE(eventually([&] { return (*server)->stats().read_queue_depth == 2 && (*server)->stats().misses == 2; },
                     5000ms));
  CHECK(pattern.total_reads() == 1);
  pattern.set_gate(false);
  CHECK(wanted.get());
  CHECK(joined.get());
  a->release_layer(3);
  b->release_layer(0);
  REQUIRE(eventually([&] { return (*server)->stats().fill_state == "done"; }, 10000ms));
  const IoStats st = (*server)->stats();
  CHECK(st.slots_used == 32);
  CHECK(st.reads == 1);              // the demand's own read of (3, 7)
  CHECK(st.fill_records == 31);      // every other record, (0, 0) included, once
  CHECK(pattern.reads_of(3, 7) == 1);
  CHECK(pattern.reads_of(0, 0) == 1);
  CHECK(pattern.total_reads() == 32);
}

TEST_CASE("fill: reads nothing while a client keeps asking, then fills once the clients go quiet",
          "[ioserver][fill]") {
  // Hazard (measured): fill reads issued between the layers of a cold decode queued its demand
  // reads behind them (2.8-3.6 against 5.7-6.7 tok/s on a disk that reads a record in ~26 ms).
  const auto dir = test::synth_container();
  const std::uint64_t records = records_of(dir);
  auto config = fill_config("fill-idle", records, true);
  config.fill_idle = 1000ms;
  auto server = IoServer::create(config);
  if (!server) FAIL(server.error().message);
  auto lease = (*server)->attach(::getpid());
  REQUIRE(lease);
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  auto source = DaemonExpertSource::open(*lease, info->geometry);
  REQUIRE(source);
  // A sequence asking every ~50 ms for 1.5 s (longer than the idle time): demands and releases.
  std::set<int> asked;
  const auto until = std::chrono::steady_clock::now() + 1500ms;
  for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
    const int expert = i % 4;
    auto bytes = (*source)->acquire_bytes(1, expert);
    if (!bytes) FAIL(bytes.error().message);
    asked.insert(expert);
    (*source)->release_layer(1);
    std::this_thread::sleep_for(50ms);
  }
  IoStats st = (*server)->stats();
  CHECK(st.fill_records == 0);
  CHECK(st.fill_state == "filling");
  CHECK(st.reads == asked.size());  // the demands' own reads only
  // Quiet now: the fill reads every other record.
  REQUIRE(eventually([&] { return (*server)->stats().fill_state == "done"; }, 20000ms));
  st = (*server)->stats();
  CHECK(st.fill_records == records - asked.size());
  CHECK(st.slots_used == records);
  CHECK(st.reads == asked.size());
}

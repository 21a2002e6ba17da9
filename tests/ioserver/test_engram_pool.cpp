// The daemon's Engram page pool (ioserver/engram, data_plane/engram_service.cpp) and its client
// (compute/io/daemon_engram_rows.*), against an in-process IoServer serving synthetic tables
// written by write_synthetic_engram: rows through the daemon equal the in-process
// EngramRowSource's bit for bit; a second client's reads are hits; a prefetched page then
// demanded is a hit; the pool's counters exact; a damaged table refused at creation with the
// parser's message; Engram entries naming a page beyond a table or an unknown table are breaches
// (the client detached with the exact reason); the ring encodings round-trip at their limits; a client
// in another process reads the same rows and this one then hits the pages it pulled in.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <vector>

#include "compute/engram/engram_json.hpp"
#include "compute/engram/engram_rows.hpp"
#include "compute/engram/engram_synth.hpp"
#include "compute/io/daemon_engram_rows.hpp"
#include "shared/ipc/ring_entries.hpp"
#include "shared/ipc/segment_names.hpp"
#include "shared/ipc/shm_layout.hpp"
#include "shared/ipc/shm_segment.hpp"
#include "shared/ipc/spsc_ring.hpp"
#include "tests/ioserver/test_support.hpp"
#include "tests/shared/temp_dir.hpp"

using namespace waste;
using namespace waste::engram;
using test::eventually;
using namespace std::chrono_literals;

namespace {

// Two Engram layers (1 and 3), n-grams 2..3, 2 heads: 4 columns a token (as tests/compute).
ModelConfig engram_config(int head_dim) {
  ModelConfig c;
  c.vocab = 100;
  c.engram_layer_ids = {1, 3};
  c.engram_vocab_size = 50;
  c.engram_max_ngram_size = 3;
  c.engram_n_heads = 2;
  c.engram_head_dim = head_dim;
  c.engram_pad_id = 7;
  c.engram_compressed_vocab_size = 40;
  return c;
}

struct Fixture {
  test::TempDir dir{"engram-pool"};
  EngramTables tables;
  explicit Fixture(int bits = 8, int head_dim = 64) {
    SynthEngramRequest r;
    r.seed = 99;
    r.bits = bits;
    auto out = write_synthetic_engram(engram_config(head_dim), dir.path(), r);
    INFO((out ? std::string() : out.error().message));
    REQUIRE(out.has_value());
    auto t = load_engram_tables(dir.path());
    REQUIRE(t.has_value());
    tables = std::move(*t);
  }
  Result<std::unique_ptr<IoServer>> server(std::uint64_t pool_pages = 64) const {
    return server(test::pattern_config("engram", 4), pool_pages);
  }
  Result<std::unique_ptr<IoServer>> server(IoServerConfig config, std::uint64_t pool_pages) const {
    config.engram_pool_pages = pool_pages;
    IoServer::Parts parts;
    parts.reader = std::make_unique<test::PatternReader>(2, 8, 4096);
    parts.engram_dir = dir.path();
    return IoServer::create(config, std::move(parts));
  }
  EngramRowSource in_process() const {
    EngramRowSourceOptions o;
    o.cache_bytes = 0;
    o.reader_threads = 0;
    auto s = EngramRowSource::open(dir.path(), tables.layout, o);
    REQUIRE(s.has_value());
    return std::move(*s);
  }
  std::uint64_t rows(std::size_t l) const { return tables.layout.layers[l].rows(); }
  std::uint64_t pages(std::size_t l, const EngramRowSource& s) const {
    const auto per = s.header(l).rows_per_page();
    return (rows(l) + per - 1) / per;
  }
};

std::vector<std::uint64_t> all_rows(std::uint64_t n) {
  std::vector<std::uint64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  // A fixed shuffle and a repeated row: the order and duplicates of a real run.
  std::reverse(v.begin(), v.begin() + std::ptrdiff_t(n / 2));
  v.push_back(n / 3);
  return v;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string hex_entry(std::uint64_t e) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(e));
  return b;
}

}  // namespace

TEST_CASE("engram pool: Engram request and completion entries round-trip at their limits, and their checks", "[ioserver][ipc]") {
  using namespace waste::ipc;
  for (const std::uint64_t page : {std::uint64_t{0}, std::uint64_t{25'600'000}, kMaxEngramPages - 1}) {
    const auto r = decode_engram_request(encode_engram_request(RequestKind::engram_demand, 255, page, 0xFFFF));
    CHECK(r.kind == RequestKind::engram_demand);
    CHECK(r.table == 255);
    CHECK(r.page == page);
    CHECK(r.tag == 0xFFFFu);
  }
  const auto c = decode_engram_completion(encode_engram_completion({0xFFFF, false, true, 0x3FFFFFFFu}));
  CHECK(c.tag == 0xFFFFu);
  CHECK(c.miss);
  CHECK_FALSE(c.error);
  CHECK(c.value == 0x3FFFFFFFu);
  CHECK(is_engram_completion(encode_engram_completion({1, true, true, 3})));
  // An expert completion never looks like an Engram one: layers stop at kMaxLayers - 1 = 254.
  CHECK_FALSE(is_engram_completion(encode_completion({ipc::kMaxLayers - 1, ipc::kMaxExperts - 1, true, true, 0x3FFFFFFFu})));

  const std::uint64_t pages[2] = {6, 10};
  auto check = [&](std::uint64_t e) { return check_request(e, 2, 8, 2, pages); };
  CHECK(check(encode_engram_request(RequestKind::engram_demand, 1, 9, 1023)) == RequestCheck::ok);
  CHECK(check(encode_engram_request(RequestKind::engram_demand, 1, 10, 0)) == RequestCheck::bad_engram_page);
  CHECK(check(encode_engram_request(RequestKind::engram_prefetch, 2, 0, 0)) == RequestCheck::bad_engram_table);
  CHECK(check(encode_engram_request(RequestKind::engram_prefetch, 0, 0, 5)) == RequestCheck::reserved_bits);
  CHECK(check(encode_engram_request(RequestKind::engram_release, 0, 0, 0)) == RequestCheck::ok);
  CHECK(check(encode_engram_request(RequestKind::engram_release, 0, 1, 0)) == RequestCheck::reserved_bits);
  // A daemon without tables: every Engram entry names an unknown table.
  CHECK(check_request(encode_engram_request(RequestKind::engram_demand, 0, 0, 0), 2, 8) ==
        RequestCheck::bad_engram_table);
  CHECK(check_request(encode_request(RequestKind::demand, 1, 7), 2, 8, 2, pages) == RequestCheck::ok);
  CHECK(check_request(std::uint64_t{7} << 40, 2, 8, 2, pages) == RequestCheck::bad_kind);
}

TEST_CASE("engram pool: rows through the daemon equal the in-process rows bit for bit, a second client hits",
          "[ioserver][engram]") {
  for (const int bits : {8, 4}) {
    Fixture f(bits);
    EngramRowSource local = f.in_process();
    auto server = f.server();
    REQUIRE(server);
    auto a = (*server)->attach(::getpid());
    auto b = (*server)->attach(::getpid());
    REQUIRE((a && b));
    auto ra = DaemonEngramRows::open(*a, f.tables.layout);
    auto rb = DaemonEngramRows::open(*b, f.tables.layout);
    INFO((ra ? std::string() : ra.error().message));
    REQUIRE((ra && rb));
    REQUIRE((*ra)->layers() == 2);
    REQUIRE((*ra)->width() == 64);

    std::uint64_t rows_read = 0, total_pages = 0;
    for (std::size_t l = 0; l < 2; ++l) {
      const auto ids = all_rows(f.rows(l));
      const std::uint64_t pages = f.pages(l, local);
      total_pages += pages;
      std::vector<float> want(ids.size() * 64), got(ids.size() * 64), again(ids.size() * 64);
      REQUIRE(local.read_rows(l, ids, want));
      REQUIRE((*ra)->read_rows(l, ids, got));
      CHECK(same_bits(got, want));
      IoStats st = (*server)->stats();
      REQUIRE(st.engram.size() == 2);
      CHECK(st.engram[l].layer == f.tables.layout.layers[l].layer);
      CHECK(st.engram[l].pages == pages);
      CHECK(st.engram[l].misses == pages);  // each page demanded once, read once
      CHECK(st.engram[l].hits == 0);
      CHECK(st.engram[l].reads == pages);
      CHECK(st.engram[l].bytes_read == pages * 4096);
      CHECK(st.engram[l].prefetch_reads == 0);

      // The second client: the pages the first pulled in are hits, nothing is read again.
      REQUIRE((*rb)->read_rows(l, ids, again));
      CHECK(same_bits(again, want));
      st = (*server)->stats();
      CHECK(st.engram[l].hits == pages);
      CHECK(st.engram[l].misses == pages);
      CHECK(st.engram[l].reads == pages);
      rows_read += ids.size();
    }
    const EngramRowStats sa = (*ra)->stats(), sb = (*rb)->stats();
    CHECK(sa.misses == rows_read);
    CHECK(sa.hits == 0);
    CHECK(sa.bytes_read == total_pages * 4096);
    CHECK(sb.hits == rows_read);
    CHECK(sb.misses == 0);
    CHECK(sb.bytes_read == 0);
    // Every page resident, none pinned once both releases are served.
    REQUIRE(eventually([&] { return (*server)->stats().engram_pool_pinned == 0; }, 5000ms));
    const IoStats st = (*server)->stats();
    CHECK(st.engram_pool_pages == 64);
    CHECK(st.engram_pool_used == total_pages);
    CHECK(st.engram_evictions == 0);
    CHECK(st.breaches == 0);
    const auto j = stats_json(st);
    CHECK(j["engram"]["tables"][1]["hits"].get<std::uint64_t>() == st.engram[1].hits);
    CHECK(j["engram"]["pool_pages"].get<std::uint64_t>() == 64);
  }
}

TEST_CASE("engram pool: a prefetched page then demanded is a hit, a small pool evicts and still reads right",
          "[ioserver][engram]") {
  Fixture f;
  EngramRowSource local = f.in_process();
  {
    auto server = f.server();
    REQUIRE(server);
    auto a = (*server)->attach(::getpid());
    REQUIRE(a);
    auto rows = DaemonEngramRows::open(*a, f.tables.layout);
    REQUIRE(rows);
    const auto ids = all_rows(f.rows(1));
    const std::uint64_t pages = f.pages(1, local);
    (*rows)->prefetch(1, ids);
    CHECK((*rows)->stats().prefetched == pages);
    REQUIRE(eventually([&] { return (*server)->stats().engram[1].reads == pages; }, 5000ms));
    std::vector<float> want(ids.size() * 64), got(ids.size() * 64);
    REQUIRE(local.read_rows(1, ids, want));
    REQUIRE((*rows)->read_rows(1, ids, got));
    CHECK(same_bits(got, want));
    const IoStats st = (*server)->stats();
    CHECK(st.engram[1].hits == pages);
    CHECK(st.engram[1].misses == 0);
    CHECK(st.engram[1].prefetch_reads == pages);
    CHECK(st.engram[1].reads == pages);
    CHECK(st.engram[0].reads == 0);
    CHECK((*rows)->stats().hits == ids.size());
  }
  {
    // Two pool pages: read_rows goes one page at a time (batch = pool / 2), evicting as it goes.
    auto server = f.server(2);
    REQUIRE(server);
    auto a = (*server)->attach(::getpid());
    REQUIRE(a);
    auto rows = DaemonEngramRows::open(*a, f.tables.layout);
    REQUIRE(rows);
    const auto ids = all_rows(f.rows(0));
    const std::uint64_t pages = f.pages(0, local);
    std::vector<float> want(ids.size() * 64), got(ids.size() * 64);
    REQUIRE(local.read_rows(0, ids, want));
    REQUIRE((*rows)->read_rows(0, ids, got));
    CHECK(same_bits(got, want));
    const IoStats st = (*server)->stats();
    CHECK(st.engram[0].misses == pages);
    CHECK(st.engram[0].reads == pages);
    CHECK(st.engram_evictions == pages - 2);
    CHECK(st.engram_pool_used == 2);
  }
}

TEST_CASE("engram pool: EngramStage over the daemon's rows equals the stage over the in-process source",
          "[ioserver][engram]") {
  Fixture f(4);
  EngramRowSource local = f.in_process();
  auto server = f.server();
  REQUIRE(server);
  auto a = (*server)->attach(::getpid());
  REQUIRE(a);
  auto remote = DaemonEngramRows::open(*a, f.tables.layout);
  REQUIRE(remote);
  const std::vector<std::int32_t> tokens = {12, 55, 3, 99, 7, 7, 41, 80, 0, 23, 64};
  const std::vector<std::uint8_t> dead(tokens.size(), 0);
  const std::size_t per = 4 * 64;
  EngramStage s1(f.tables, local), s2(f.tables, **remote);
  NgramHistory h1(3), h2(3);
  REQUIRE(s1.begin(tokens, dead, h1));
  REQUIRE(s2.begin(tokens, dead, h2));  // prefetches every layer's pages through the ring
  for (const int layer : {1, 3}) {
    std::vector<float> want(tokens.size() * per), got(tokens.size() * per);
    REQUIRE(s1.rows(layer, want));
    REQUIRE(s2.rows(layer, got));
    CHECK(same_bits(got, want));
  }
  CHECK((*remote)->stats().prefetched > 0);
}

TEST_CASE("hazard: a damaged Engram table stops the daemon at creation with the file named", "[ioserver][engram]") {
  Fixture f;
  const auto l3 = f.dir.path() / "engram-L3.bin";
  {
    std::fstream io(l3, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(20);
    const char x = 0x5A;
    io.write(&x, 1);
  }
  auto server = f.server();
  REQUIRE_FALSE(server);
  CHECK(server.error().message == "engram-L3.bin: header CRC mismatch (damaged header)");

  Fixture g;
  const auto g3 = g.dir.path() / "engram-L3.bin";
  const auto size = std::filesystem::file_size(g3);
  std::filesystem::resize_file(g3, size - 4096);
  auto cut = g.server();
  REQUIRE_FALSE(cut);
  CHECK(cut.error().message == "engram-L3.bin: " + std::to_string(size - 4096) + " bytes, its header needs " +
                                   std::to_string(size) + " (truncated)");
}

TEST_CASE("hazard: an Engram request beyond a table or for an unknown table detaches the client",
          "[ioserver][engram][trust]") {
  Fixture f;
  EngramRowSource local = f.in_process();
  auto server = f.server();
  REQUIRE(server);
  auto a = (*server)->attach(::getpid());
  auto b = (*server)->attach(::getpid());
  REQUIRE((a && b));
  auto arena = ipc::ShmSegment::open(ipc::kDefaultShmDir, (*server)->segment_name(), false);
  REQUIRE(arena);
  auto view = ipc::ArenaView::attach(arena->bytes(), (*server)->segment_name());
  REQUIRE(view);
  auto rings_of = [](const ClientLease& lease) {
    auto seg = ipc::ShmSegment::open(ipc::kDefaultShmDir, lease.ring_segment_name, true);
    REQUIRE(seg);
    return std::move(*seg);
  };
  auto honest = DaemonEngramRows::open(*a, f.tables.layout);  // opened before its lease is breached
  REQUIRE(honest);
  ipc::ShmSegment sa = rings_of(*a), sb = rings_of(*b);
  ipc::RingProducer pa(reinterpret_cast<ipc::RingSegmentShm*>(sa.data())->request);
  ipc::RingProducer pb(reinterpret_cast<ipc::RingSegmentShm*>(sb.data())->request);
  const std::uint64_t pages3 = f.pages(1, local);
  const std::uint64_t beyond = ipc::encode_engram_request(ipc::RequestKind::engram_demand, 1, pages3, 0);
  const std::uint64_t unknown = ipc::encode_engram_request(ipc::RequestKind::engram_prefetch, 2, 0, 0);
  REQUIRE(pa.try_push(beyond));
  REQUIRE(pb.try_push(unknown));
  auto wake = ipc::ShmSegment::open(ipc::kDefaultShmDir, (*server)->wake_segment_name(), true);
  REQUIRE(wake);
  ipc::ring_doorbell(reinterpret_cast<ipc::WakeShm*>(wake->data())->work);
  REQUIRE(eventually([&] { return (*server)->stats().breaches == 2; }, 5000ms));
  const std::string pid = std::to_string(::getpid());
  CHECK(ipc::read_error_text(view->client(a->client_idx)) ==
        "client 0 (pid " + pid + ", lease 1) broke the ring protocol: request entry " + hex_entry(beyond) +
            ": Engram page beyond its table (2 layers x 8 experts, 2 Engram tables); detached");
  CHECK(ipc::read_error_text(view->client(b->client_idx)) ==
        "client 1 (pid " + pid + ", lease 1) broke the ring protocol: request entry " + hex_entry(unknown) +
            ": no such Engram table (2 layers x 8 experts, 2 Engram tables); detached");
  const IoStats st = (*server)->stats();
  CHECK(st.engram[1].reads == 0);  // nothing read for a bad request
  CHECK(st.engram[1].misses == 0);
  CHECK(st.clients.empty());
  // The reader on the breached lease fails with the reason, and so does a new one on that lease.
  std::vector<float> out(64);
  const std::vector<std::uint64_t> one = {0};
  auto st_read = (*honest)->read_rows(1, one, out);
  REQUIRE_FALSE(st_read);
  CHECK(st_read.error().message == "waste-ioserver (pid " + pid + ") dropped this client: client 0 (pid " + pid +
                                       ", lease 1) broke the ring protocol: request entry " + hex_entry(beyond) +
                                       ": Engram page beyond its table (2 layers x 8 experts, 2 Engram tables); detached");
  auto late = DaemonEngramRows::open(*a, f.tables.layout);
  REQUIRE_FALSE(late);
  CHECK(late.error().message.starts_with("cannot map this lease's ring segment " + a->ring_segment_name));
}

TEST_CASE("engram pool: a client in another process reads the same rows, and this process's reads of them are hits",
          "[ioserver][engram]") {
  Fixture f;
  const IoServerConfig config = test::pattern_config("engram-proc", 4);
  int to_child[2], from_child[2];
  REQUIRE(::pipe(to_child) == 0);
  REQUIRE(::pipe(from_child) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The other process: its own lease (index, generation from the parent), the named segments,
    // every row of table 1 through the daemon against its own in-process read. Exit code: 0 equal.
    std::int64_t buf[2];
    if (::read(to_child[0], buf, sizeof buf) != ssize_t(sizeof buf)) ::_exit(2);
    ClientLease lease;
    lease.client_idx = int(buf[0]);
    lease.generation = std::uint64_t(buf[1]);
    lease.segment_name = ipc::arena_segment_name(config.instance);
    auto rows = DaemonEngramRows::open(lease, f.tables.layout);
    if (!rows) ::_exit(3);
    EngramRowSourceOptions o;
    o.cache_bytes = 0;
    o.reader_threads = 0;
    auto local = EngramRowSource::open(f.dir.path(), f.tables.layout, o);
    if (!local) ::_exit(4);
    const auto ids = all_rows(f.rows(1));
    std::vector<float> want(ids.size() * 64), got(ids.size() * 64);
    if (!local->read_rows(1, ids, want) || !(*rows)->read_rows(1, ids, got)) ::_exit(5);
    const char verdict = same_bits(got, want) ? 'y' : 'n';
    if (::write(from_child[1], &verdict, 1) != 1) ::_exit(6);
    ::_exit(0);
  }
  auto server = f.server(config, 64);
  REQUIRE(server);
  auto lease = (*server)->attach(child);
  REQUIRE(lease);
  const std::int64_t buf[2] = {lease->client_idx, std::int64_t(lease->generation)};
  REQUIRE(::write(to_child[1], buf, sizeof buf) == ssize_t(sizeof buf));
  char verdict = 0;
  REQUIRE(::read(from_child[0], &verdict, 1) == 1);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(verdict == 'y');

  EngramRowSource local = f.in_process();
  const std::uint64_t pages = f.pages(1, local);
  IoStats st = (*server)->stats();
  CHECK(st.engram[1].misses == pages);
  CHECK(st.engram[1].reads == pages);
  auto mine = (*server)->attach(::getpid());
  REQUIRE(mine);
  auto rows = DaemonEngramRows::open(*mine, f.tables.layout);
  REQUIRE(rows);
  const auto ids = all_rows(f.rows(1));
  std::vector<float> want(ids.size() * 64), got(ids.size() * 64);
  REQUIRE(local.read_rows(1, ids, want));
  REQUIRE((*rows)->read_rows(1, ids, got));
  CHECK(same_bits(got, want));
  st = (*server)->stats();
  CHECK(st.engram[1].hits == pages);  // the other process's pages, still in the pool
  CHECK(st.engram[1].reads == pages);
  for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(fd);
}

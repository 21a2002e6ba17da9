// IoServer's data plane beyond the protocol: reader fault injection, the budget side's cache
// limit (set_cache_slots), and private (anonymous) memory for an in-process client.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <catch2/catch.hpp>

#include "compute/io/daemon_expert_source.hpp"
#include "faulty_reader.hpp"
#include "ioserver/control/data_plane.hpp"
#include "shared/ipc/segment_names.hpp"
#include "test_support.hpp"

using namespace waste;
using test::eventually;
using test::exact;
using namespace std::chrono_literals;

namespace {

}  // namespace

TEST_CASE("An injected read fault fails the waiting demands naming the record, nothing of it is cached",
          "[ioserver][ipc][faults]") {
  const auto [fault, text] = GENERATE(table<test::Fault, std::string>({
      {test::Fault::eio, "expert 3 of layer 1: pread: Input/output error (EIO)"},
      {test::Fault::short_read, "expert 3 of layer 1: short read (got 2048 of 4096 bytes)"},
      {test::Fault::arena_enospc, "expert 3 of layer 1: writing into the arena: No space left on device (ENOSPC)"},
      {test::Fault::arena_efault, "expert 3 of layer 1: writing into the arena: Bad address (EFAULT)"},
  }));
  auto pattern = std::make_unique<test::PatternReader>(2, 8, 4096);
  test::PatternReader* inner = pattern.get();
  auto faulty = std::make_unique<test::FaultyRecordReader>(std::move(pattern));
  test::FaultyRecordReader* gate = faulty.get();
  faulty->inject(1, 3, fault);
  auto server = IoServer::create(test::pattern_config("fault", 4), std::move(faulty));
  REQUIRE(server);
  auto la = (*server)->attach(::getpid());
  auto lb = (*server)->attach(::getpid());
  REQUIRE((la && lb));
  auto a = DaemonExpertSource::open(*la, ExpertGeometry{});
  auto b = DaemonExpertSource::open(*lb, ExpertGeometry{});
  REQUIRE((a && b));
  // Both clients wait on the one failing read.
  gate->set_gate(true);
  const int id = 3;
  REQUIRE((*a)->request(1, std::span<const int>(&id, 1)));
  REQUIRE((*b)->request(1, std::span<const int>(&id, 1)));
  REQUIRE(eventually([&] { return (*server)->stats().misses == 2; }, 2000ms));
  gate->set_gate(false);
  for (auto* s : {a->get(), b->get()}) {
    auto failed = s->acquire_bytes(1, 3);
    REQUIRE_FALSE(failed);
    REQUIRE(failed.error().code == Errc::io);
    REQUIRE(failed.error().message == text);
  }
  // The daemon goes on serving both clients.
  auto other = (*b)->acquire_bytes(0, 5);
  REQUIRE(other);
  REQUIRE(exact(*other, 0, 5));
  (*a)->release_layer(1);
  (*b)->release_layer(1);
  // Whatever the failed read left in its slot is never a hit: the next demand reads again.
  auto again = (*a)->acquire_bytes(1, 3);
  REQUIRE(again);
  REQUIRE(exact(*again, 1, 3));
  const auto st = (*server)->stats();
  REQUIRE(st.read_errors == 1);
  REQUIRE(st.reads == 2);  // (0,5) and the re-read of (1,3)
  REQUIRE(st.hits == 0);
  REQUIRE(inner->reads_of(1, 3) == (fault == test::Fault::short_read ? 2 : 1));
}

TEST_CASE("set_cache_slots evicts unpinned records above the limit and never a pinned one", "[ioserver][ipc][budget]") {
  auto server = IoServer::create(test::pattern_config("limit", 8), std::make_unique<test::PatternReader>(3, 8, 4096));
  REQUIRE(server);
  auto lease = (*server)->attach(::getpid());
  REQUIRE(lease);
  auto source = DaemonExpertSource::open(*lease, ExpertGeometry{});
  REQUIRE(source);
  for (int e = 0; e < 6; ++e) REQUIRE((*source)->acquire_bytes(0, e));
  (*source)->release_layer(0);
  for (int e = 0; e < 2; ++e) REQUIRE((*source)->acquire_bytes(1, e));  // two pinned
  REQUIRE(eventually([&] { return (*server)->stats().slots_pinned == 2; }, 2000ms));
  REQUIRE((*server)->stats().slots_used == 8);

  REQUIRE((*server)->set_cache_slots(1));
  auto st = (*server)->stats();
  REQUIRE(st.usable_slots == 1);
  REQUIRE(st.slots_used == 2);    // only the pinned ones are left, above the limit for now
  REQUIRE(st.slots_pinned == 2);
  for (int e = 0; e < 2; ++e) {
    auto bytes = (*source)->acquire_bytes(1, e);  // the pinned views are untouched
    REQUIRE(bytes);
    REQUIRE(exact(*bytes, 1, e));
  }
  // A demand beyond the limit fails like a full arena (this client pins more than the limit).
  auto refused = (*source)->acquire_bytes(2, 0);
  REQUIRE_FALSE(refused);
  REQUIRE(refused.error().message == "expert 0 of layer 2: this client pins every arena slot itself, so none can be "
                                     "freed (arena 8 slots, 1 usable: 2 pinned, 2 of them by this client, 0 being read)");
  (*source)->release_layer(2);
  (*source)->release_layer(1);
  REQUIRE(eventually([&] { return (*server)->stats().slots_used == 1; }, 2000ms));  // trimmed as they unpinned

  REQUIRE((*server)->set_cache_slots(3));
  for (int e = 0; e < 3; ++e) REQUIRE((*source)->acquire_bytes(2, e));
  REQUIRE((*server)->stats().slots_used == 3);
  REQUIRE((*server)->set_cache_slots(100));  // clamped to the arena
  REQUIRE((*server)->stats().usable_slots == 8);
  auto zero = (*server)->set_cache_slots(0);
  REQUIRE_FALSE(zero);
  REQUIRE(zero.error().message == "set_cache_slots: at least 1 slot must stay usable");
}

TEST_CASE("An in-process IoServer on private memory serves the same bytes as the daemon path, with no names",
          "[ioserver][ipc][inprocess]") {
  const auto dir = test::synth_container();
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  IoServerConfig named;
  named.container = dir;
  named.instance = test::unique_instance("named");
  named.arena_slots = 4;
  IoServerConfig priv = named;
  priv.instance = test::unique_instance("private");
  priv.private_memory = true;
  auto daemon = IoServer::create(named);
  auto in_process = IoServer::create(priv);
  REQUIRE((daemon && in_process));
  REQUIRE((*in_process)->segment_name().empty());
  REQUIRE((*in_process)->wake_segment_name().empty());
  auto dl = (*daemon)->attach(::getpid());
  auto pl = (*in_process)->attach(::getpid());
  REQUIRE((dl && pl));
  REQUIRE(pl->mappings);
  REQUIRE(pl->segment_name.empty());
  REQUIRE(pl->ring_segment_name.empty());
  // Nothing of the private server is in /dev/shm.
  const std::string prefix = "waste_" + std::to_string(::getuid()) + "_" + priv.instance;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    REQUIRE_FALSE(entry.path().filename().string().starts_with(prefix));
  }
  auto ds = DaemonExpertSource::open(*dl, info->geometry, DaemonExpertSource::OpenOptions{dir});
  auto ps = DaemonExpertSource::open(*pl, info->geometry, DaemonExpertSource::OpenOptions{dir});
  REQUIRE(ds);
  REQUIRE(ps);
  for (int layer = 0; layer < info->manifest.config.n_layers; ++layer) {
    for (int e = 0; e < 3; ++e) {
      auto d = (*ds)->acquire_bytes(layer, e);
      auto p = (*ps)->acquire_bytes(layer, e);
      if (!d) {  // a dense layer: both say so alike
        REQUIRE_FALSE(p);
        REQUIRE(p.error().message == d.error().message);
        continue;
      }
      REQUIRE(p);
      REQUIRE(p->size() == d->size());
      REQUIRE(std::memcmp(p->data(), d->data(), d->size()) == 0);
      const auto oracle = test::pread_record(dir, layer, e, info->geometry.record_bytes);
      REQUIRE(oracle.size() == p->size());
      REQUIRE(std::memcmp(oracle.data(), p->data(), oracle.size()) == 0);
    }
    (*ds)->release_layer(layer);
    (*ps)->release_layer(layer);
  }
  auto dt = map_trunk_segment(*dl);
  auto pt = map_trunk_segment(*pl);
  REQUIRE((dt && pt));
  REQUIRE(dt->image.size() == pt->image.size());
  REQUIRE(std::memcmp(dt->image.data(), pt->image.data(), dt->image.size()) == 0);
  // The mappings outlive the server while the lease holds them.
  in_process->reset();
  REQUIRE(pt->image.size() == dt->image.size());
  REQUIRE(std::memcmp(dt->image.data(), pt->image.data(), dt->image.size()) == 0);
}

TEST_CASE("The DataPlane adapter detaches by lease and resizes the cache", "[ioserver][ipc]") {
  IoServerConfig config;
  config.container = test::synth_container();
  config.instance = test::unique_instance("plane");
  config.arena_slots = 4;
  auto plane = ioserver::make_io_server_plane(config);
  REQUIRE(plane);
  auto lease = (*plane)->attach(::getpid());
  REQUIRE(lease);
  REQUIRE(lease->lease.ring_segment == ipc::ring_segment_name(config.instance, 0, 1));
  REQUIRE(lease->lease.wake_segment == ipc::wake_segment_name(config.instance));
  REQUIRE(lease->lease.shm_dir == "/dev/shm");
  REQUIRE(lease->lease.pid == ::getpid());
  auto stale = (*plane)->detach(0, ::getpid(), 7);
  REQUIRE_FALSE(stale);
  REQUIRE(stale.error().message == "detach of client 0 (pid " + std::to_string(::getpid()) +
                                       ", lease 7) ignored: the index is held by pid " + std::to_string(::getpid()) +
                                       ", lease 1 (a stale detach)");
  REQUIRE((*plane)->set_cache_slots(2));
  REQUIRE((*plane)->stats().at("totals").at("usable_slots") == 2);
  REQUIRE((*plane)->detach(0, ::getpid(), 1));
  REQUIRE((*plane)->stats().at("clients").empty());
}

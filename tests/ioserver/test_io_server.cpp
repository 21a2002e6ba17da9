#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <catch2/catch.hpp>

#include "compute/io/daemon_expert_source.hpp"
#include "shared/container/trunk.hpp"
#include "shared/ipc/segment_names.hpp"
#include "test_support.hpp"

using namespace waste;
using test::eventually;
using namespace std::chrono_literals;

namespace {

IoServerConfig container_config(const std::string& what, std::uint64_t slots) {
  IoServerConfig config;
  config.container = test::synth_container();
  config.instance = test::unique_instance(what);
  config.arena_slots = slots;
  config.verify_crc = true;
  return config;
}

ExpertGeometry geometry_of(const std::filesystem::path& dir) {
  auto info = ContainerInfo::open(dir);
  REQUIRE(info);
  return info->geometry;
}

// Write/read a lease over a pipe (fork tests): index and generation; names derive from the instance.
void send_lease(int fd, const ClientLease& lease) {
  const std::int64_t buf[2] = {lease.client_idx, std::int64_t(lease.generation)};
  REQUIRE(::write(fd, buf, sizeof(buf)) == ssize_t(sizeof(buf)));
}
bool read_full(int fd, void* p, std::size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= std::size_t(r);
  }
  return true;
}

}  // namespace

TEST_CASE("Records served through the arena equal a direct pread of the bank", "[ioserver][ipc]") {
  const auto config = container_config("bytes", 6);
  auto server = IoServer::create(config);
  if (!server) FAIL(server.error().message);
  auto lease = (*server)->attach(::getpid());
  REQUIRE(lease);
  const auto geometry = geometry_of(config.container);
  auto source = DaemonExpertSource::open(*lease, geometry);
  REQUIRE(source);
  for (int layer : {1, 2, 3}) {
    const std::vector<int> ids = {7, 0, 3};
    REQUIRE((*source)->request(layer, ids));
    for (int e : ids) {
      auto bytes = (*source)->acquire_bytes(layer, e);
      REQUIRE(bytes);
      const auto oracle = test::pread_record(config.container, layer, e, geometry.record_bytes);
      REQUIRE(oracle.size() == bytes->size());
      REQUIRE(std::memcmp(oracle.data(), bytes->data(), oracle.size()) == 0);
      auto view = (*source)->acquire(layer, e);
      REQUIRE(view);
      REQUIRE(view->layer == layer);
      REQUIRE(view->expert == e);
      REQUIRE(reinterpret_cast<const std::byte*>(view->index[0]) == bytes->data() + 48);  // in place, no copy
    }
    (*source)->release_layer(layer);
  }
  const auto st = (*server)->stats();
  REQUIRE(st.misses == 9);
  REQUIRE(st.reads == 9);
  REQUIRE(st.bytes_read == 9 * geometry.record_bytes);
  REQUIRE(st.slots_used == 6);
  REQUIRE(st.evictions == 3);
  REQUIRE(st.clients.size() == 1);
  REQUIRE(st.clients[0].misses == 9);
  std::uint64_t histogram_total = 0;
  for (auto n : st.read_latency_us_log2) histogram_total += n;
  REQUIRE(histogram_total == 9);
  REQUIRE((*source)->stats().misses == 9);
  REQUIRE((*source)->stats().bytes_read == 9 * geometry.record_bytes);
}

TEST_CASE("The trunk segment holds the trunk image and is mapped read-only", "[ioserver][ipc]") {
  const auto config = container_config("trunk", 4);
  auto server = IoServer::create(config);
  REQUIRE(server);
  auto lease = (*server)->attach(::getpid());
  REQUIRE(lease);
  REQUIRE_FALSE(lease->trunk_segment_name.empty());
  auto image = map_trunk_segment(*lease);
  REQUIRE(image);
  auto info = ContainerInfo::open(config.container);
  REQUIRE(info);
  const auto layout = TrunkLayout::plan(info->manifest);
  REQUIRE(image->image.size() == layout.image_bytes);
  std::vector<std::byte> oracle(layout.image_bytes);
  REQUIRE(load_trunk_image(info->files.trunk(), info->manifest, layout, oracle));
  REQUIRE(std::memcmp(oracle.data(), image->image.data(), oracle.size()) == 0);
  struct stat st {};
  REQUIRE(::stat(("/dev/shm/" + lease->trunk_segment_name).c_str(), &st) == 0);
  REQUIRE((st.st_mode & 0777) == 0400);
  // The arena too: clients can only map it read-only (the trust boundary, shm_layout.md).
  REQUIRE(::stat(("/dev/shm/" + lease->segment_name).c_str(), &st) == 0);
  REQUIRE((st.st_mode & 0777) == 0400);
  REQUIRE(::stat(("/dev/shm/" + lease->ring_segment_name).c_str(), &st) == 0);
  REQUIRE((st.st_mode & 0777) == 0600);
}

TEST_CASE("A failed read reaches the client as an error naming the record", "[ioserver][ipc]") {
  auto reader = std::make_unique<test::PatternReader>(2, 8, 4096);
  reader->fail_on(1, 6);
  auto server = IoServer::create(test::pattern_config("fail", 4), std::move(reader));
  REQUIRE(server);
  auto lease = (*server)->attach(::getpid());
  REQUIRE(lease);
  auto source = DaemonExpertSource::open(*lease, ExpertGeometry{});
  REQUIRE(source);
  const std::vector<int> ids = {6, 2};
  REQUIRE((*source)->request(1, ids));
  auto bad = (*source)->acquire_bytes(1, 6);
  REQUIRE_FALSE(bad);
  REQUIRE(bad.error().code == Errc::io);
  REQUIRE(bad.error().message == "expert 6 of layer 1: bad magic 0x00000000");
  REQUIRE((*source)->acquire_bytes(1, 2));  // the other record is fine
  auto out_of_range = (*source)->acquire_bytes(1, 8);
  REQUIRE_FALSE(out_of_range);
  REQUIRE(out_of_range.error().message == "expert 8 of layer 1: outside this container's 2 layers x 8 experts");
  (*source)->release_layer(1);
  REQUIRE((*server)->stats().read_errors == 1);
  REQUIRE(eventually([&] { return (*server)->stats().slots_pinned == 0; }, 2000ms));
}

TEST_CASE("A second daemon for a live instance is refused, attach and detach manage client blocks", "[ioserver][ipc]") {
  auto config = test::pattern_config("twice", 2);
  config.max_clients = 1;
  auto first = IoServer::create(config, std::make_unique<test::PatternReader>(1, 4, 4096));
  REQUIRE(first);
  auto second = IoServer::create(config, std::make_unique<test::PatternReader>(1, 4, 4096));
  REQUIRE_FALSE(second);
  REQUIRE(second.error().message ==
          "instance '" + config.instance + "' is already served by waste-ioserver pid " + std::to_string(::getpid()));
  auto lease = (*first)->attach(::getpid());
  REQUIRE(lease);
  auto full = (*first)->attach(::getpid());
  REQUIRE_FALSE(full);
  REQUIRE(full.error().message == "attach: all 1 client slots are in use");
  auto source = DaemonExpertSource::open(*lease, ExpertGeometry{});
  REQUIRE(source);
  REQUIRE((*source)->acquire_bytes(0, 1));
  REQUIRE((*first)->stats().slots_pinned == 1);
  REQUIRE((*first)->detach(lease->client_idx, lease->pid, lease->generation));
  REQUIRE((*first)->stats().slots_pinned == 0);
  REQUIRE((*first)->stats().clients.empty());
  auto stale = (*source)->acquire_bytes(0, 2);
  REQUIRE_FALSE(stale);
  REQUIRE(stale.error().message == "waste-ioserver (pid " + std::to_string(::getpid()) +
                                       ") dropped this client (lease 0 reclaimed)");
  REQUIRE((*first)->attach(::getpid()));
}

TEST_CASE("A stopped daemon makes waiting clients fail with a clear error", "[ioserver][ipc]") {
  auto reader = std::make_unique<test::PatternReader>(1, 4, 4096);
  reader->set_gate(true);  // the read never finishes
  test::PatternReader* probe = reader.get();
  auto server = IoServer::create(test::pattern_config("stop", 2), std::move(reader));
  REQUIRE(server);
  auto lease = (*server)->attach(::getpid());
  REQUIRE(lease);
  auto source = DaemonExpertSource::open(*lease, ExpertGeometry{});
  REQUIRE(source);
  std::thread stopper([&] {
    while (probe->total_reads() == 0) std::this_thread::sleep_for(1ms);
    probe->set_gate(false);
    (*server)->stop();
  });
  auto r = (*source)->acquire_bytes(0, 3);
  stopper.join();
  // Either the read completed just before the stop, or the wait saw the stop.
  if (!r) REQUIRE(r.error().message == "waste-ioserver (pid " + std::to_string(::getpid()) + ") stopped");
  auto after = (*source)->acquire_bytes(0, 1);
  REQUIRE_FALSE(after);
  REQUIRE(after.error().message == "waste-ioserver (pid " + std::to_string(::getpid()) + ") stopped");
}

TEST_CASE("kill -9 of a client frees its pins within 2 s and others go on", "[ioserver][ipc]") {
  const auto config = container_config("killclient", 6);
  int to_child[2], from_child[2];
  REQUIRE(::pipe(to_child) == 0);
  REQUIRE(::pipe(from_child) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::int64_t buf[2];
    if (!read_full(to_child[0], buf, sizeof(buf))) ::_exit(2);
    ClientLease lease;
    lease.client_idx = int(buf[0]);
    lease.generation = std::uint64_t(buf[1]);
    lease.segment_name = ipc::arena_segment_name(config.instance);
    auto source = DaemonExpertSource::open(lease, ExpertGeometry{});
    if (!source) ::_exit(3);
    const std::vector<int> ids = {1, 2, 3, 4};
    if (!(*source)->request(2, ids)) ::_exit(4);
    // Mid-request: two completions are consumed, two are left unread in its ring.
    for (int e : {1, 2}) {
      if (!(*source)->acquire_bytes(2, e)) ::_exit(5);
    }
    const char ready = 'r';
    if (::write(from_child[1], &ready, 1) != 1) ::_exit(6);
    for (;;) ::pause();  // holding four pins (two unread completions) until killed
  }
  auto server = IoServer::create(config);
  REQUIRE(server);
  auto lease = (*server)->attach(child);
  REQUIRE(lease);
  send_lease(to_child[1], *lease);
  char ready = 0;
  REQUIRE(read_full(from_child[0], &ready, 1));
  REQUIRE(eventually([&] { return (*server)->stats().slots_pinned == 4; }, 2000ms));

  auto my_lease = (*server)->attach(::getpid());
  REQUIRE(my_lease);
  auto source = DaemonExpertSource::open(*my_lease, ExpertGeometry{});
  REQUIRE(source);

  ::kill(child, SIGKILL);  // not reaped yet: a zombie must count as dead too
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(eventually([&] { return (*server)->stats().slots_pinned == 0; }, 2000ms));
  REQUIRE(std::chrono::steady_clock::now() - t0 < 2s);
  const auto st = (*server)->stats();
  REQUIRE(st.clients_reclaimed == 1);
  REQUIRE(st.clients.size() == 1);
  REQUIRE(st.clients[0].pid == ::getpid());
  // With 6 slots and 4 of them freed, this client can pin 5 new records.
  const std::vector<int> ids = {0, 5, 6, 7};
  REQUIRE((*source)->request(3, ids));
  for (int e : ids) REQUIRE((*source)->acquire_bytes(3, e));
  REQUIRE((*source)->acquire_bytes(1, 0));
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
}

TEST_CASE("kill -9 of the daemon makes a waiting client fail within 2 s", "[ioserver][ipc]") {
  const auto dir = test::synth_container();
  const std::string instance = test::unique_instance("killdaemon");
  int from_child[2];
  REQUIRE(::pipe(from_child) == 0);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    IoServerConfig config;
    config.container = dir;
    config.instance = instance;
    config.arena_slots = 4;
    auto server = IoServer::create(config);
    if (!server) ::_exit(2);
    auto lease = (*server)->attach(parent);
    if (!lease) ::_exit(3);
    const std::int64_t buf[2] = {lease->client_idx, std::int64_t(lease->generation)};
    if (::write(from_child[1], buf, sizeof(buf)) != ssize_t(sizeof(buf))) ::_exit(4);
    for (;;) ::pause();
  }
  std::int64_t buf[2];
  REQUIRE(read_full(from_child[0], buf, sizeof(buf)));
  ClientLease lease;
  lease.client_idx = int(buf[0]);
  lease.generation = std::uint64_t(buf[1]);
  lease.segment_name = ipc::arena_segment_name(instance);
  auto source = DaemonExpertSource::open(lease, ExpertGeometry{});
  REQUIRE(source);
  REQUIRE((*source)->acquire_bytes(1, 1));
  (*source)->release_layer(1);

  ::kill(child, SIGKILL);  // left unreaped on purpose: the zombie must not look alive
  const auto t0 = std::chrono::steady_clock::now();
  auto r = (*source)->acquire_bytes(2, 3);
  const auto waited = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(r);
  REQUIRE(r.error().code == Errc::ipc);
  REQUIRE(r.error().message == "waste-ioserver (pid " + std::to_string(child) + ") is gone");
  REQUIRE(waited < 2s);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  for (const auto& name : {lease.segment_name, ipc::trunk_segment_name(instance), ipc::wake_segment_name(instance),
                           ipc::ring_segment_name(instance, lease.client_idx, lease.generation)}) {
    std::filesystem::remove("/dev/shm/" + name);
  }
}

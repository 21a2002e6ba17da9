// The daemon's trust boundary and liveness rules (docs/design/ring.md "Trust boundary",
// shm_layout.md): garbage ring indices and entries, a scribbled header, stale detaches, reused
// indices, a stopped client, a full shared-memory file system, container identity.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>

#include "compute/io/daemon_expert_source.hpp"
#include "shared/ipc/segment_names.hpp"
#include "shared/ipc/shm_layout.hpp"
#include "shared/ipc/shm_segment.hpp"
#include "test_support.hpp"

using namespace waste;
using test::eventually;
using test::exact;
using namespace std::chrono_literals;

namespace {

std::string pid_text() { return std::to_string(::getpid()); }

// The client's writable ring segment, as a hostile process would map it.
struct Scribbler {
  ipc::ShmSegment rings;
  ipc::RingSegmentShm* shm = nullptr;
  explicit Scribbler(const ClientLease& lease) {
    auto seg = ipc::ShmSegment::open(ipc::kDefaultShmDir, lease.ring_segment_name, true);
    REQUIRE(seg);
    rings = std::move(*seg);
    shm = reinterpret_cast<ipc::RingSegmentShm*>(rings.data());
  }
};

void ring_daemon(const IoServer& server) {
  auto wake = ipc::ShmSegment::open(ipc::kDefaultShmDir, server.wake_segment_name(), true);
  REQUIRE(wake);
  ipc::ring_doorbell(reinterpret_cast<ipc::WakeShm*>(wake->data())->work);
}

// What the daemon told client `idx` (its block's error text), read through a read-only mapping.
std::string client_error_text(const IoServer& server, int idx) {
  auto arena = ipc::ShmSegment::open(ipc::kDefaultShmDir, server.segment_name(), false);
  REQUIRE(arena);
  auto view = ipc::ArenaView::attach(arena->bytes(), server.segment_name());
  REQUIRE(view);
  return ipc::read_error_text(view->client(idx));
}

// Redirects fd 2 into a file for the lifetime of the object; text() reads what was written.
class StderrCapture {
 public:
  StderrCapture() : path_(std::filesystem::temp_directory_path() / ("waste-stderr-" + pid_text())) {
    saved_ = ::dup(2);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrCapture() {
    restore();
    std::filesystem::remove(path_);
  }
  std::string text() {
    restore();
    std::ifstream in(path_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::filesystem::path path_;
  int saved_ = -1;
};

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
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

TEST_CASE("A garbage request-ring tail detaches that client with one logged reason, the others go on",
          "[ioserver][ipc][trust]") {
  auto server = IoServer::create(test::pattern_config("tail", 8), std::make_unique<test::PatternReader>(2, 8, 4096));
  REQUIRE(server);
  auto a = (*server)->attach(::getpid());
  auto b = (*server)->attach(::getpid());
  auto c = (*server)->attach(::getpid());
  REQUIRE((a && b && c));
  auto sa = DaemonExpertSource::open(*a, ExpertGeometry{});
  auto sb = DaemonExpertSource::open(*b, ExpertGeometry{});
  REQUIRE((sa && sb));
  REQUIRE((*sa)->acquire_bytes(0, 1));  // A holds one pin
  REQUIRE((*server)->stats().slots_pinned == 1);

  StderrCapture err;
  Scribbler scribble_a(*a), scribble_c(*c);
  // Hazard: tails no producer can reach (more than a ring ahead, or behind the head).
  scribble_a.shm->request.tail.store(1 + ipc::kRingCapacity + 1, std::memory_order_release);
  scribble_c.shm->request.tail.store(~std::uint64_t{0}, std::memory_order_release);
  ring_daemon(**server);
  REQUIRE(eventually([&] { return (*server)->stats().breaches == 2; }, 2000ms));

  // B is served as before, with exact bytes.
  auto bytes = (*sb)->acquire_bytes(1, 2);
  REQUIRE(bytes);
  REQUIRE(exact(*bytes, 1, 2));
  const auto st = (*server)->stats();
  REQUIRE(st.clients.size() == 1);
  REQUIRE(st.clients[0].client_idx == b->client_idx);
  REQUIRE(st.slots_pinned == 1);  // A's pin went with it
  REQUIRE_FALSE((*server)->occupant(a->client_idx));
  REQUIRE_FALSE(std::filesystem::exists(ipc::kDefaultShmDir / a->ring_segment_name));

  const std::string why_a = "client 0 (pid " + pid_text() + ", lease 1) broke the ring protocol: request ring tail 1026 "
                            "against head 1 (capacity 1024); detached";
  REQUIRE(client_error_text(**server, a->client_idx) == why_a);
  auto after = (*sa)->acquire_bytes(0, 3);
  REQUIRE_FALSE(after);
  REQUIRE(after.error().message == "waste-ioserver (pid " + pid_text() + ") dropped this client: " + why_a);
  // Two breaches within a second: one line, the other counted.
  const std::string log = err.text();
  REQUIRE(count_of(log, "broke the ring protocol") == 1);
}

TEST_CASE("A client repeating one demand keeps the daemon's pin list and waiting queue bounded",
          "[ioserver][ipc][trust]") {
  // Hazard: every repeat of a held demand appended to the client's pin list, and every repeat
  // of a waiting one to the blocked queue, without bound (daemon memory, O(n) scans).
  auto config = test::pattern_config("dup", 2);
  config.arena_wait = std::chrono::milliseconds(60000);   // nothing expires during the test
  auto server = IoServer::create(config, std::make_unique<test::PatternReader>(2, 8, 4096));
  REQUIRE(server);
  auto a = (*server)->attach(::getpid());
  auto b = (*server)->attach(::getpid());
  REQUIRE((a && b));
  Scribbler ra(*a), rb(*b);
  ipc::RingProducer a_requests(ra.shm->request), b_requests(rb.shm->request);
  ipc::RingConsumer a_completions(ra.shm->completion);
  auto pump = [&] {
    while (a_completions.try_pop()) {
    }
  };
  // A asks for expert 1 of layer 0 3000 times, reading every answer (in batches of 500, so
  // fewer than kRingCapacity answers are ever unread).
  constexpr int kRepeats = 3000, kBatch = 500;
  for (int sent = 0; sent < kRepeats; sent += kBatch) {
    for (int i = 0; i < kBatch; ++i) REQUIRE(a_requests.try_push(ipc::encode_request(ipc::RequestKind::demand, 0, 1)));
    ring_daemon(**server);
    REQUIRE(eventually([&] {
      pump();
      const auto st = (*server)->stats();
      return st.hits + st.misses == std::uint64_t(sent + kBatch);
    }, 5000ms));
  }
  auto st = (*server)->stats();
  REQUIRE(st.clients.size() == 2);
  CHECK(st.clients[0].pinned_slots == 1);
  CHECK(st.clients[0].pin_entries == 1);
  CHECK(st.breaches == 0);

  // A pins the other slot too; B's demands for a third record must wait. B repeats its demand
  // without ever reading an answer: past kRingCapacity - 1 waiting it is detached, its queue gone.
  REQUIRE(a_requests.try_push(ipc::encode_request(ipc::RequestKind::demand, 0, 2)));
  ring_daemon(**server);
  REQUIRE(eventually([&] { pump(); return (*server)->stats().slots_pinned == 2; }, 5000ms));
  int pushed = 0;
  std::uint32_t most_waiting = 0;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while ((*server)->stats().breaches == 0 && most_waiting < ipc::kRingCapacity &&
         std::chrono::steady_clock::now() < deadline) {
    if (b_requests.try_push(ipc::encode_request(ipc::RequestKind::demand, 1, 5))) {
      ++pushed;
    } else {
      ring_daemon(**server);
      std::this_thread::sleep_for(1ms);
    }
    most_waiting = std::max(most_waiting, (*server)->stats().demands_waiting);
  }
  CHECK(most_waiting < ipc::kRingCapacity);
  st = (*server)->stats();
  REQUIRE(st.breaches == 1);
  CHECK(pushed >= int(ipc::kRingCapacity));
  CHECK(eventually([&] { return (*server)->stats().demands_waiting == 0; }, 2000ms));
  CHECK(client_error_text(**server, b->client_idx) ==
        "client " + std::to_string(b->client_idx) + " (pid " + pid_text() + ", lease " + std::to_string(b->generation) +
            ") broke the ring protocol: more than 1023 demands waiting for an arena slot (expert 5 of layer 1 again); "
            "detached");
  // A is served as before.
  st = (*server)->stats();
  REQUIRE(st.clients.size() == 1);
  CHECK(st.clients[0].pin_entries == 2);
}

TEST_CASE("A request naming an expert or layer beyond the container's entries is a breach", "[ioserver][ipc][trust]") {
  auto server = IoServer::create(test::pattern_config("index", 4), std::make_unique<test::PatternReader>(2, 8, 4096));
  REQUIRE(server);
  auto a = (*server)->attach(::getpid());
  auto b = (*server)->attach(::getpid());
  REQUIRE((a && b));
  Scribbler sa(*a), sb(*b);
  ipc::RingProducer pa(sa.shm->request), pb(sb.shm->request);
  REQUIRE(pa.try_push(ipc::encode_request(ipc::RequestKind::demand, 1, 8)));  // expert == n_experts
  REQUIRE(pb.try_push(ipc::encode_request(ipc::RequestKind::prefetch, 2, 0)));  // layer == n_layers
  ring_daemon(**server);
  REQUIRE(eventually([&] { return (*server)->stats().breaches == 2; }, 2000ms));
  REQUIRE(client_error_text(**server, a->client_idx) ==
          "client 0 (pid " + pid_text() +
              ", lease 1) broke the ring protocol: request entry 0x0000010000080001: expert out of range (2 layers x "
              "8 experts); detached");
  REQUIRE(client_error_text(**server, b->client_idx) ==
          "client 1 (pid " + pid_text() +
              ", lease 1) broke the ring protocol: request entry 0x0000020000000002: layer out of range (2 layers x "
              "8 experts); detached");
  REQUIRE((*server)->stats().reads == 0);  // nothing was read for a bad index
  // The index is reusable at once, with fresh rings.
  auto again = (*server)->attach(::getpid());
  REQUIRE(again);
  REQUIRE(again->client_idx == 0);
  REQUIRE(again->generation == 2);
  auto source = DaemonExpertSource::open(*again, ExpertGeometry{});
  REQUIRE(source);
  auto bytes = (*source)->acquire_bytes(1, 7);
  REQUIRE(bytes);
  REQUIRE(exact(*bytes, 1, 7));
}

TEST_CASE("A scribbled arena header changes nothing the daemon or an open client does", "[ioserver][ipc][trust]") {
  auto server = IoServer::create(test::pattern_config("header", 4), std::make_unique<test::PatternReader>(2, 8, 4096));
  REQUIRE(server);
  auto lease = (*server)->attach(::getpid());
  REQUIRE(lease);
  auto source = DaemonExpertSource::open(*lease, ExpertGeometry{});
  REQUIRE(source);
  REQUIRE((*source)->acquire_bytes(0, 0));
  const auto path = ipc::kDefaultShmDir / lease->segment_name;
  if (::getuid() != 0) {
    // Clients cannot map the arena writable at all.
    REQUIRE(::open(path.c_str(), O_RDWR | O_CLOEXEC) == -1);
    REQUIRE(errno == EACCES);
    return;
  }
  // Root can write it anyway: the hazard is a header full of lies.
  auto rw = ipc::ShmSegment::open(ipc::kDefaultShmDir, lease->segment_name, true);
  REQUIRE(rw);
  auto* h = reinterpret_cast<ipc::ControlHeaderShm*>(rw->data());
  h->n_slots = 0xFFFFFFFFu;
  h->n_layers = 1;
  h->n_experts = 1;
  h->record_bytes = 1;
  h->slot_bytes = 1;
  h->slots_offset = h->arena_offset = std::uint64_t{1} << 40;
  // The daemon keeps its own layout and limits: layer 1, expert 6 is still a valid record.
  auto bytes = (*source)->acquire_bytes(1, 6);
  REQUIRE(bytes);
  REQUIRE(bytes->size() == 4096);
  REQUIRE(exact(*bytes, 1, 6));
  REQUIRE((*server)->stats().breaches == 0);
  REQUIRE((*server)->stats().slots_total == 4);
  // A new client refuses the inconsistent header instead of trusting it.
  auto other = (*server)->attach(::getpid());
  REQUIRE(other);
  auto refused = DaemonExpertSource::open(*other, ExpertGeometry{});
  REQUIRE_FALSE(refused);
  REQUIRE(refused.error().message == "shared memory segment " + lease->segment_name + " is truncated or inconsistent");
}

TEST_CASE("A stale detach is ignored and a reused index gets fresh rings", "[ioserver][ipc][trust]") {
  auto config = test::pattern_config("stale", 4);
  config.max_clients = 1;
  auto server = IoServer::create(config, std::make_unique<test::PatternReader>(2, 8, 4096));
  REQUIRE(server);
  auto first = (*server)->attach(::getpid());
  REQUIRE(first);
  REQUIRE(first->ring_segment_name == ipc::ring_segment_name(config.instance, 0, 1));
  auto old_source = DaemonExpertSource::open(*first, ExpertGeometry{});
  REQUIRE(old_source);
  REQUIRE((*old_source)->acquire_bytes(0, 1));
  REQUIRE((*server)->detach(0, ::getpid(), first->generation));
  REQUIRE_FALSE(std::filesystem::exists(ipc::kDefaultShmDir / first->ring_segment_name));

  auto second = (*server)->attach(::getpid());
  REQUIRE(second);
  REQUIRE(second->client_idx == 0);
  REQUIRE(second->generation == 2);
  REQUIRE(second->ring_segment_name == ipc::ring_segment_name(config.instance, 0, 2));
  // Hazard: the first lease's detach arrives late (or is replayed) and would drop the successor.
  auto stale = (*server)->detach(0, ::getpid(), 1);
  REQUIRE_FALSE(stale);
  REQUIRE(stale.error().code == Errc::argument);
  REQUIRE(stale.error().message == "detach of client 0 (pid " + pid_text() + ", lease 1) ignored: the index is held by pid " +
                                       pid_text() + ", lease 2 (a stale detach)");
  auto wrong_pid = (*server)->detach(0, ::getpid() + 1, 2);
  REQUIRE_FALSE(wrong_pid);
  REQUIRE(wrong_pid.error().message == "detach of client 0 (pid " + std::to_string(::getpid() + 1) +
                                           ", lease 2) ignored: the index is held by pid " + pid_text() +
                                           ", lease 2 (a stale detach)");
  const auto who = (*server)->occupant(0);
  REQUIRE(who);
  REQUIRE(who->generation == 2);

  auto source = DaemonExpertSource::open(*second, ExpertGeometry{});
  REQUIRE(source);
  // The stale client writes into its own, unlinked rings: nothing reaches the successor's.
  auto late = (*old_source)->acquire_bytes(0, 2);
  REQUIRE_FALSE(late);
  REQUIRE(late.error().message == "waste-ioserver (pid " + pid_text() + ") dropped this client (lease 0 reclaimed)");
  auto bytes = (*source)->acquire_bytes(0, 3);
  REQUIRE(bytes);
  REQUIRE(exact(*bytes, 0, 3));
  const auto st = (*server)->stats();
  REQUIRE(st.clients.size() == 1);
  REQUIRE(st.clients[0].misses == 1);  // only its own demand: none of the stale one's arrived
  REQUIRE(st.breaches == 0);
  // The old lease cannot even be opened again: its ring file is gone.
  auto reopened = DaemonExpertSource::open(*first, ExpertGeometry{});
  REQUIRE_FALSE(reopened);
  REQUIRE(reopened.error().message == "cannot map this lease's ring segment " + first->ring_segment_name +
                                          ": cannot open shared memory segment /dev/shm/" + first->ring_segment_name +
                                          ": No such file or directory");
}

TEST_CASE("A client stopped (SIGSTOP) for 10 s keeps its lease and then reads the same bytes",
          "[ioserver][ipc][trust]") {
  const auto config = test::pattern_config("sigstop", 8);
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
    std::vector<std::vector<std::byte>> before;
    for (int e = 0; e < 4; ++e) {
      auto b = (*source)->acquire_bytes(0, e);
      if (!b || !exact(*b, 0, e)) ::_exit(4);
      before.emplace_back(b->begin(), b->end());
    }
    const char ready = 'r';
    if (::write(from_child[1], &ready, 1) != 1) ::_exit(5);
    ::raise(SIGSTOP);
    // Resumed: the pinned views still hold the same bytes, and new demands are served.
    char ok = '1';
    for (int e = 0; e < 4; ++e) {
      auto b = (*source)->acquire_bytes(0, e);
      if (!b || std::memcmp(b->data(), before[std::size_t(e)].data(), b->size()) != 0) ok = '0';
    }
    (*source)->release_layer(0);
    for (int e = 4; e < 8; ++e) {
      auto b = (*source)->acquire_bytes(1, e);
      if (!b || !exact(*b, 1, e)) ok = '0';
    }
    (*source)->release_layer(1);
    if (::write(from_child[1], &ok, 1) != 1) ::_exit(6);
    ::_exit(0);
  }
  auto server = IoServer::create(config, std::make_unique<test::PatternReader>(2, 8, 4096));
  REQUIRE(server);
  auto lease = (*server)->attach(child);
  REQUIRE(lease);
  const std::int64_t buf[2] = {lease->client_idx, std::int64_t(lease->generation)};
  REQUIRE(::write(to_child[1], buf, sizeof(buf)) == ssize_t(sizeof(buf)));
  char ready = 0;
  REQUIRE(read_full(from_child[0], &ready, 1));
  int status = 0;
  REQUIRE(::waitpid(child, &status, WUNTRACED) == child);
  REQUIRE(WIFSTOPPED(status));
  // Hazard: a stopped process looks like a dead one to a heartbeat. Ten seconds of sweeps.
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(200ms);
    (*server)->reclaim_dead_clients();
  }
  REQUIRE((*server)->occupant(lease->client_idx));
  REQUIRE((*server)->stats().clients_reclaimed == 0);
  REQUIRE((*server)->stats().slots_pinned == 4);
  REQUIRE(::kill(child, SIGCONT) == 0);
  char verdict = 0;
  REQUIRE(read_full(from_child[0], &verdict, 1));
  REQUIRE(verdict == '1');
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE((*server)->stats().clients_reclaimed == 0);
}

TEST_CASE("A shared-memory directory without room is refused before any segment exists, naming both sizes",
          "[ioserver][ipc][trust]") {
  // A 1 MiB tmpfs in a private mount namespace of a child process (root, or an unprivileged
  // user namespace): the hazard is a full /dev/shm that would SIGBUS the daemon on first touch.
  int from_child[2];
  REQUIRE(::pipe(from_child) == 0);
  const auto dir = std::filesystem::temp_directory_path() / ("waste-small-shm-" + pid_text());
  std::filesystem::create_directories(dir);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto say = [&](const std::string& text) {
      const auto n = std::uint32_t(text.size());
      (void)!::write(from_child[1], &n, sizeof n);
      (void)!::write(from_child[1], text.data(), n);
    };
    if (::unshare(CLONE_NEWNS) != 0) {
      say("unshare: " + std::string(std::strerror(errno)));
      ::_exit(1);
    }
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m,mode=0700") != 0) {
      say("mount: " + std::string(std::strerror(errno)));
      ::_exit(1);
    }
    auto config = test::pattern_config("smallshm", 512);  // 512 x 4 KiB slots: 2 MiB of arena
    config.shm_dir = dir;
    auto refused = IoServer::create(config, std::make_unique<test::PatternReader>(1, 4, 4096));
    say(refused ? std::string("created") : refused.error().message);
    // Nothing was left behind.
    say(std::to_string(std::distance(std::filesystem::directory_iterator(dir), {})));
    // An arena that fits goes there, and a client maps it from there. (In a scope: the server's
    // threads end before _exit.)
    {
      config.arena_slots = 16;
      config.instance += "-fits";
      auto server = IoServer::create(config, std::make_unique<test::PatternReader>(1, 4, 4096));
      if (!server) {
        say(server.error().message);
        ::_exit(1);
      }
      auto lease = (*server)->attach(::getpid());
      if (!lease) ::_exit(1);
      auto source = DaemonExpertSource::open(*lease, ExpertGeometry{});
      bool same = false;
      if (source) {
        auto bytes = (*source)->acquire_bytes(0, 3);
        same = bytes && exact(*bytes, 0, 3);
      }
      say(lease->shm_dir + " " + (same ? "exact" : "wrong") + " " +
          (std::filesystem::exists(dir / lease->segment_name) ? "file" : "nofile"));
    }
    ::_exit(0);
  }
  auto hear = [&]() {
    std::uint32_t n = 0;
    REQUIRE(read_full(from_child[0], &n, sizeof n));
    std::string text(n, '\0');
    REQUIRE(read_full(from_child[0], text.data(), n));
    return text;
  };
  const std::string refusal = hear();
  int status = 0;
  if (refusal.starts_with("unshare:") || refusal.starts_with("mount:")) {
    ::waitpid(child, &status, 0);
    std::filesystem::remove_all(dir);
    FAIL("cannot build a small tmpfs here: " << refusal);
  }
  const auto layout = ipc::ArenaLayout::compute(4096, 512, 8);
  const std::uint64_t needed = layout.total_bytes + 4096 + 8 * ((sizeof(ipc::RingSegmentShm) + 4095) / 4096 * 4096);
  REQUIRE(refusal == "shared memory " + dir.string() + " has 1.0 MB free, waste-ioserver's segments need " +
                         ipc::format_shm_bytes(needed) +
                         ": enlarge that file system or choose another directory with --shm-dir DIR");
  REQUIRE(hear() == "0");
  REQUIRE(hear() == dir.string() + " exact file");
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("A segment name held by another user blocks a daemon with an error naming the owner and the path",
          "[ioserver][ipc][trust]") {
  // Hazard: in a sticky /dev/shm another user's file under this instance's name cannot be
  // removed, and the daemon said only "File exists". Built here as root: a sticky directory, a
  // file owned by nobody (65534), and a child that runs the daemon as uid 65533.
  if (::geteuid() != 0) FAIL("needs root to own a file as another user (chown) and to drop to a second uid");
  const auto dir = std::filesystem::temp_directory_path() / ("waste-foreign-shm-" + pid_text());
  std::filesystem::create_directories(dir);
  REQUIRE(::chmod(dir.c_str(), 01777) == 0);
  auto config = test::pattern_config("foreign", 16);
  config.shm_dir = dir;
  constexpr uid_t kDaemonUid = 65533, kOwnerUid = 65534;
  const std::string name = "waste_" + std::to_string(kDaemonUid) + "_" + config.instance + "_arena";
  {
    const int fd = ::open((dir / name).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    ::close(fd);
  }
  REQUIRE(::chown((dir / name).c_str(), kOwnerUid, kOwnerUid) == 0);
  int from_child[2];
  REQUIRE(::pipe(from_child) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::string text;
    if (::setresgid(kDaemonUid, kDaemonUid, kDaemonUid) != 0 || ::setresuid(kDaemonUid, kDaemonUid, kDaemonUid) != 0) {
      text = "setresuid: " + std::string(std::strerror(errno));
    } else {
      auto refused = IoServer::create(config, std::make_unique<test::PatternReader>(1, 4, 4096));
      text = refused ? std::string("created") : refused.error().message;
    }
    const auto n = std::uint32_t(text.size());
    (void)!::write(from_child[1], &n, sizeof n);
    (void)!::write(from_child[1], text.data(), n);
    ::_exit(0);
  }
  std::uint32_t n = 0;
  REQUIRE(read_full(from_child[0], &n, sizeof n));
  std::string refusal(n, '\0');
  REQUIRE(read_full(from_child[0], refusal.data(), n));
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  const std::string path = (dir / name).string();
  CHECK(refusal == "shared memory segment " + path + " already exists and belongs to user nobody (uid 65534), " +
                       "not to this process's uid 65533: remove it as that user or root (rm " + path + ")");
  CHECK(std::filesystem::exists(dir / name));   // never someone else's file removed
  std::filesystem::remove_all(dir);
}

TEST_CASE("The /dev/shm refusal names the remedies", "[ioserver][ipc][trust]") {
  auto space = ipc::shm_space(ipc::kDefaultShmDir);
  REQUIRE(space);
  const std::uint64_t needed = space->free_bytes + (std::uint64_t{1} << 40);
  auto st = ipc::check_shm_space(ipc::kDefaultShmDir, needed);
  REQUIRE_FALSE(st);
  REQUIRE(st.error().message == "shared memory /dev/shm has " + ipc::format_shm_bytes(space->free_bytes) +
                                    " free, waste-ioserver's segments need " + ipc::format_shm_bytes(needed) +
                                    ": enlarge it (docker run --shm-size=..., or mount -o remount,size=... /dev/shm) "
                                    "or put the segments on another tmpfs or hugetlbfs directory with --shm-dir DIR");
  REQUIRE(ipc::format_shm_bytes(60'000'000) == "60.0 MB");
  REQUIRE(ipc::format_shm_bytes(2'100'000'000) == "2.10 GB");
}

TEST_CASE("A client refuses a daemon whose container identity differs, naming the file", "[ioserver][ipc][trust]") {
  // A private copy, so touching a bank does not disturb the shared test container.
  const auto original = test::synth_container();
  const auto copy = std::filesystem::path(WASTE_BINARY_DIR) / "test-data" / ("identity-" + pid_text());
  std::filesystem::remove_all(copy);
  std::filesystem::copy(original, copy, std::filesystem::copy_options::recursive);
  IoServerConfig config;
  config.container = copy;
  config.instance = test::unique_instance("identity");
  config.arena_slots = 4;
  auto server = IoServer::create(config);
  REQUIRE(server);
  auto info = ContainerInfo::open(copy);
  REQUIRE(info);
  const DaemonExpertSource::OpenOptions same{copy};
  {
    auto lease = (*server)->attach(::getpid());
    REQUIRE(lease);
    REQUIRE(DaemonExpertSource::open(*lease, info->geometry, same));
    REQUIRE((*server)->detach(lease->client_idx, lease->pid, lease->generation));
  }
  // Hazard 1: a client that opened another container (same files, another place).
  {
    auto lease = (*server)->attach(::getpid());
    REQUIRE(lease);
    auto other = DaemonExpertSource::open(*lease, info->geometry, DaemonExpertSource::OpenOptions{original});
    REQUIRE_FALSE(other);
    REQUIRE(other.error().message == "waste-ioserver (pid " + pid_text() + ") serves another container than " +
                                         std::filesystem::weakly_canonical(original).string() +
                                         " (its canonical path differs)");
    REQUIRE((*server)->detach(lease->client_idx, lease->pid, lease->generation));
  }
  // Hazard 2: a bank rewritten since the daemon opened it.
  const auto bank = copy / "experts-L1.bin";
  const auto before = std::filesystem::last_write_time(bank);
  std::filesystem::last_write_time(bank, before + 5s);
  struct stat st {};
  REQUIRE(::stat(bank.c_str(), &st) == 0);
  const std::int64_t now_ns = std::int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  auto lease = (*server)->attach(::getpid());
  REQUIRE(lease);
  auto changed = DaemonExpertSource::open(*lease, info->geometry, same);
  REQUIRE_FALSE(changed);
  const auto canonical = std::filesystem::weakly_canonical(copy);
  REQUIRE(changed.error().message == "container " + canonical.string() + ": " + (canonical / "experts-L1.bin").string() +
                                         " differs from the file waste-ioserver (pid " + pid_text() + ") opened (mtime_ns " +
                                         std::to_string(now_ns) + " here, " + std::to_string(now_ns - 5'000'000'000) +
                                         " there): restart the daemon or open the same files");
  server->reset();
  std::filesystem::remove_all(copy);
}

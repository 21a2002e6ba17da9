// The io_uring record reader against the pread one: same bytes, same errors, and an IoServer
// serving a client through it.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>

#include "compute/io/daemon_expert_source.hpp"
#include "ioserver/nvme/uring_record_reader.hpp"
#include "test_support.hpp"

using namespace waste;

namespace {

struct Readers {
  ContainerInfo info;
  std::unique_ptr<RecordReader> pread;
  std::unique_ptr<UringRecordReader> uring;
};

Readers open_readers(const std::filesystem::path& dir, bool verify_crc) {
  auto info = ContainerInfo::open(dir);
  if (!info) FAIL(info.error().message);
  const BankReadOptions options{true, verify_crc};
  auto a = ExpertBanks::open(dir, info->manifest, info->n_codebooks, options);
  auto b = ExpertBanks::open(dir, info->manifest, info->n_codebooks, options);
  REQUIRE(a);
  REQUIRE(b);
  Readers r{*info, make_bank_record_reader(std::move(*a), info->manifest), nullptr};
  r.uring = make_uring_record_reader(std::move(*b), info->manifest);
  if (!r.uring->io_uring_engaged()) WARN("io_uring unavailable (" << r.uring->fallback_reason() << "): pread fallback tested");
  return r;
}

// A private copy of the shared synthetic container, removed on scope exit.
struct ScratchContainer {
  std::filesystem::path dir;
  explicit ScratchContainer(const std::string& what) {
    dir = std::filesystem::path(WASTE_BINARY_DIR) / "test-data" / ("uring-" + what + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::copy(test::synth_container(), dir, std::filesystem::copy_options::recursive);
  }
  ~ScratchContainer() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  void flip_byte(int layer, std::uint64_t offset) const {
    std::fstream f(dir / ("experts-L" + std::to_string(layer) + ".bin"), std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(f);
    f.seekg(std::streamoff(offset));
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x5A);
    f.seekp(std::streamoff(offset));
    f.write(&c, 1);
    REQUIRE(f);
  }
};

}  // namespace

TEST_CASE("io_uring reads of every record equal a plain pread of the bank", "[ioserver][uring]") {
  const auto dir = test::synth_container();
  auto r = open_readers(dir, true);
  const std::uint64_t record_bytes = r.uring->record_bytes();
  REQUIRE(record_bytes > 0);
  // An aligned slot (the O_DIRECT descriptor when engaged) and a misaligned one (the buffered descriptor).
  AlignedBuffer slot(record_bytes + kRecordAlign);
  std::size_t records = 0;
  for (const auto& [layer, bank] : r.info.manifest.banks) {
    REQUIRE(r.uring->has_layer(layer));
    for (int e = 0; e < bank.experts; ++e) {
      const auto oracle = test::pread_record(dir, layer, e, record_bytes);
      REQUIRE(oracle.size() == record_bytes);
      for (std::size_t shift : {std::size_t(0), std::size_t(8)}) {
        auto buffer = slot.span().subspan(shift, record_bytes);
        std::memset(buffer.data(), 0xEE, buffer.size());
        const auto st = r.uring->read(layer, e, buffer);
        if (!st) FAIL(st.error().message);
        REQUIRE(std::memcmp(buffer.data(), oracle.data(), record_bytes) == 0);
      }
      ++records;
    }
  }
  REQUIRE(records == r.info.manifest.banks.size() * std::size_t(r.uring->n_experts()));

  // Every reader thread gets its own ring: read concurrently from two more threads.
  const int layer = r.info.manifest.banks.begin()->first;
  std::vector<int> mismatches(2, -1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer buf(record_bytes);
      int bad = 0;
      for (int e = 0; e < r.uring->n_experts(); ++e) {
        const auto oracle = test::pread_record(dir, layer, e, record_bytes);
        if (!r.uring->read(layer, e, buf.span().first(record_bytes)) ||
            std::memcmp(buf.data(), oracle.data(), record_bytes) != 0) {
          ++bad;
        }
      }
      mismatches[std::size_t(t)] = bad;
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(mismatches == std::vector<int>{0, 0});
}

TEST_CASE("io_uring reader reports damaged and truncated records exactly like the pread reader",
          "[ioserver][uring]") {
  ScratchContainer scratch("damaged");
  auto info = ContainerInfo::open(scratch.dir);
  REQUIRE(info);
  const std::uint64_t record_bytes = info->manifest.max_record_bytes();
  const int first = info->manifest.banks.begin()->first;
  const int last = info->manifest.banks.rbegin()->first;
  const int n_experts = info->manifest.banks.begin()->second.experts;
  REQUIRE(n_experts >= 4);
  scratch.flip_byte(first, 3 * record_bytes + 1);                 // header magic of expert 3
  scratch.flip_byte(last, 2 * record_bytes + 48 + 5);              // gate indices of expert 2: CRC only

  auto r = open_readers(scratch.dir, true);
  AlignedBuffer a(record_bytes), b(record_bytes);
  auto expect_same_error = [&](int layer, int expert, const std::string& prefix) {
    const auto want = r.pread->read(layer, expert, a.span().first(record_bytes));
    const auto got = r.uring->read(layer, expert, b.span().first(record_bytes));
    REQUIRE(!want);
    REQUIRE(!got);
    CHECK(got.error().message == want.error().message);
    CHECK(got.error().code == want.error().code);
    CHECK(got.error().message.rfind(prefix, 0) == 0);
  };
  expect_same_error(first, 3, "expert 3 of layer " + std::to_string(first) + ": ");
  expect_same_error(last, 2, "expert 2 of layer " + std::to_string(last) + ": ");
  // Out-of-range keys are refused before any read, with the same words.
  expect_same_error(first, n_experts, "expert " + std::to_string(n_experts) + " of layer " + std::to_string(first) +
                                          ": no such expert");
  // Undamaged neighbours still read.
  REQUIRE(r.uring->read(first, 2, b.span().first(record_bytes)));

  // A bank cut short after opening: the last record ends early.
  const auto bank = scratch.dir / ("experts-L" + std::to_string(last) + ".bin");
  const int last_expert = n_experts - 1;
  std::filesystem::resize_file(bank, std::uint64_t(last_expert) * record_bytes + 100);
  const std::string who = "expert " + std::to_string(last_expert) + " of layer " + std::to_string(last) + ": ";
  const auto got = r.uring->read(last, last_expert, b.span().first(record_bytes));
  REQUIRE(!got);
  REQUIRE(got.error().message == who + "short read (got 100 of " + std::to_string(record_bytes) + " bytes)");
  expect_same_error(last, last_expert, who + "short read");
}

TEST_CASE("IoServer with io_uring=true serves a client the bank's bytes", "[ioserver][uring][ipc]") {
  IoServerConfig config;
  config.container = test::synth_container();
  config.instance = test::unique_instance("uring");
  config.arena_slots = 4;
  config.verify_crc = true;
  config.io_uring = true;
  auto server = IoServer::create(config);
  if (!server) FAIL(server.error().message);
  auto lease = (*server)->attach(::getpid());
  REQUIRE(lease);
  auto info = ContainerInfo::open(config.container);
  REQUIRE(info);
  auto source = DaemonExpertSource::open(*lease, info->geometry);
  REQUIRE(source);
  const int layer = info->manifest.banks.begin()->first;
  const std::vector<int> ids = {5, 0, 2};
  REQUIRE((*source)->request(layer, ids));
  for (int e : ids) {
    auto bytes = (*source)->acquire_bytes(layer, e);
    if (!bytes) FAIL(bytes.error().message);
    const auto oracle = test::pread_record(config.container, layer, e, info->geometry.record_bytes);
    REQUIRE(oracle.size() == bytes->size());
    REQUIRE(std::memcmp(oracle.data(), bytes->data(), oracle.size()) == 0);
  }
  const auto st = (*server)->stats();
  REQUIRE(st.reads == 3);
  REQUIRE(st.read_errors == 0);
  // Engaged exactly when this kernel lets a process set up a ring.
  {
    auto banks = ExpertBanks::open(config.container, info->manifest, info->n_codebooks, BankReadOptions{});
    REQUIRE(banks);
    const bool allowed = make_uring_record_reader(std::move(*banks), info->manifest)->io_uring_engaged();
    REQUIRE(st.io_uring == allowed);
  }
  (*source)->release_layer(layer);
}

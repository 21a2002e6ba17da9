// AnonMemory (shared/memory/anon_memory.hpp): sizes, 2 MB alignment, zero fill, and the
// MADV_HUGEPAGE advice as the kernel records it (the "hg" flag in /proc/self/smaps), for the
// memory itself and for the in-process daemon's private segments built on it.
#include <catch2/catch.hpp>

#include <sys/mman.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "shared/ipc/shm_segment.hpp"
#include "shared/memory/anon_memory.hpp"

using namespace waste;

namespace {

struct Mapping {
  bool found = false;
  std::string perms;     // "rw-p"
  std::string vm_flags;  // " rd wr mr mw me ac hg ..."
};

// The /proc/self/smaps entry holding addr.
Mapping mapping_of(const void* addr) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  std::ifstream in("/proc/self/smaps");
  std::string line;
  Mapping m;
  bool inside = false;
  while (std::getline(in, line)) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(' ') != std::string::npos &&
        line.find(':') > line.find(' ')) {
      if (m.found) break;
      inside = a >= lo && a < hi;
      if (inside) {
        m.found = true;
        head >> m.perms;
      }
      continue;
    }
    if (inside && line.starts_with("VmFlags:")) m.vm_flags = line.substr(8) + " ";
  }
  return m;
}

bool thp_compiled_in() { return std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled"); }

}  // namespace

TEST_CASE("AnonMemory: from 2 MB up, 2 MB-aligned, rounded to 2 MB, zeroed, private and advised for huge pages") {
  const std::uint64_t want = (std::uint64_t{5} << 20) + 1;
  auto m = AnonMemory::allocate(want, "test image");
  REQUIRE(m.has_value());
  CHECK(m->size() == (std::uint64_t{6} << 20));
  CHECK(reinterpret_cast<std::uintptr_t>(m->data()) % AnonMemory::kHugePage == 0);
  bool all_zero = true;
  for (std::uint64_t i = 0; i < m->size(); i += 4093) all_zero = all_zero && m->data()[i] == std::byte{0};
  CHECK(all_zero);
  m->data()[m->size() - 1] = std::byte{7};
  CHECK(m->data()[m->size() - 1] == std::byte{7});
  const Mapping map = mapping_of(m->data());
  REQUIRE(map.found);
  CHECK(map.perms == "rw-p");
  if (thp_compiled_in()) {
    CHECK(m->huge_page_advised());
    CHECK(map.vm_flags.find(" hg ") != std::string::npos);
  }
}

TEST_CASE("AnonMemory: below 2 MB, 4 KB pages and no advice") {
  auto m = AnonMemory::allocate(10000, "small table");
  REQUIRE(m.has_value());
  CHECK(m->size() == 12288);
  CHECK_FALSE(m->huge_page_advised());
  const Mapping map = mapping_of(m->data());
  REQUIRE(map.found);
  CHECK(map.vm_flags.find(" hg ") == std::string::npos);
}

TEST_CASE("AnonMemory: a move hands the mapping over, release gives it up") {
  auto m = AnonMemory::allocate(std::uint64_t{3} << 20, "moved");
  REQUIRE(m.has_value());
  std::byte* p = m->data();
  AnonMemory owner = std::move(*m);
  CHECK(m->data() == nullptr);
  CHECK(m->size() == 0);
  CHECK(owner.data() == p);
  CHECK(owner.size() == (std::uint64_t{4} << 20));
  const std::uint64_t size = owner.size();
  std::byte* raw = owner.release();
  CHECK(raw == p);
  CHECK(owner.data() == nullptr);
  CHECK(mapping_of(raw).found);  // still mapped: release did not unmap
  ::munmap(raw, size);
}

TEST_CASE("ShmSegment::create_private: the in-process daemon's arena and trunk are private, huge-page-advised memory") {
  auto seg = ipc::ShmSegment::create_private(std::uint64_t{8} << 20);
  REQUIRE(seg.has_value());
  CHECK(seg->size() == (std::uint64_t{8} << 20));
  CHECK(seg->path().empty());
  CHECK(reinterpret_cast<std::uintptr_t>(seg->data()) % AnonMemory::kHugePage == 0);
  const Mapping map = mapping_of(seg->data());
  REQUIRE(map.found);
  CHECK(map.perms == "rw-p");  // was rw-s (shared anonymous memory, where shmem THP rules apply)
  if (thp_compiled_in()) CHECK(map.vm_flags.find(" hg ") != std::string::npos);
}

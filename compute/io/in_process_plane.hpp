// The in-process data plane: waste-ioserver's own IoServer (cache policy, readers, rings)
// running inside this process on private memory (IoServerConfig::private_memory: anonymous
// MAP_SHARED, no names), attached once with attach(getpid()), and read through
// DaemonExpertSource over that lease. Same classes and protocol as the daemon path, so what
// `--in-process` measures predicts the daemon. Used by Engine::open without a daemon,
// `waste --in-process` / `--cache-records` and the bench's in-process modes.
//
// Trunk: the private IoServer builds the trunk image in its own anonymous segment (the same
// loader as the daemon's) and the engine opens its Trunk over that image (open_shared_trunk).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "compute/engram/engram_layout.hpp"
#include "compute/engram/engram_rows.hpp"
#include "compute/expert_source.hpp"
#include "shared/container/container.hpp"
#include "shared/container/trunk.hpp"
#include "shared/result.hpp"

namespace waste {

struct InProcessPlaneOptions {
  // Arena slots of the private IoServer. 0 = the memory plan's minimum expert cache
  // (2 * top_k: one layer's experts, double-buffered).
  std::uint64_t arena_slots = 0;
  int reader_threads = 2;   // the IoServer's reader threads, 1..64 (0 is taken as 1)
  bool direct_io = true;
  bool verify_crc = false;
  // Every record of the container in the arena, read at open (compute-only benchmarks):
  // arena_slots is then the record count and the warm-up is not counted in stats().
  bool resident = false;
  // DeepSeek-V4.1's Engram tables (load_engram_tables' layout): the plane also serves their rows
  // from the IoServer's Engram page pool through a second lease (the rings are single-producer,
  // single-consumer). Null: no Engram reader.
  const engram::EngramLayout* engram_layout = nullptr;
};

struct InProcessPlane {
  // Owns the private IoServer; destroying it detaches and stops the server.
  std::unique_ptr<ExpertSource> source;
  // Over the server's trunk image (keeps the mapping alive on its own).
  std::shared_ptr<const Trunk> trunk;
  std::uint64_t arena_slots = 0;
  // DaemonEngramRows over the second lease when engram_layout was given. Declared last: destroyed
  // before the source that owns the server.
  std::unique_ptr<engram::EngramRowReader> engram_rows;
};

// Errors: the container's (Errc::io / Errc::format), the IoServer's ("arena_slots must be ..."),
// each prefixed with "in-process data plane".
Result<InProcessPlane> open_in_process_plane(const std::filesystem::path& model, const ContainerInfo& info,
                                             const InProcessPlaneOptions& options);

}  // namespace waste

// What the control plane needs from the data path (shared-memory arena, rings, readers).
// The daemon talks to this interface, not to IoServer directly, so the control plane can be
// tested in-process with a scripted data plane and the real one (io_server_plane.cpp) stays a
// thin adapter. Called from the daemon's control thread only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ioserver/io_server_config.hpp"
#include "shared/ipc/protocol.hpp"
#include "shared/result.hpp"

namespace waste::ioserver {

struct PlaneLease {
  int client_idx = -1;
  std::string arena_segment;
  std::string trunk_segment;
  // Everything else the client needs to map (generation, pid, trunk_bytes, daemon_pid, ring and
  // wake segments, shm_dir): the control plane sends it as the attach reply's `lease`
  // (shared/ipc/protocol.hpp; read back by compute/io/daemon_connect.cpp).
  ipc::Lease lease;
};

class DataPlane {
 public:
  virtual ~DataPlane() = default;
  virtual Result<PlaneLease> attach(int pid) = 0;
  // Drop whoever holds client_idx (the control plane's own bookkeeping decided so).
  virtual Status detach(int client_idx) = 0;
  // Drop client_idx only if pid and generation (the lease's) name its current occupant; a stale
  // detach is refused with Errc::argument and changes nothing.
  virtual Status detach(int client_idx, int pid, std::uint64_t generation) {
    (void)pid;
    (void)generation;
    return detach(client_idx);  // planes without generations (test doubles)
  }
  // How many arena slots the cache may hold records in (<= arena_slots): the daemon lowers it
  // to admit a client's state within the budget and raises it again when the client goes
  // (IoServer::set_cache_slots). Planes that cannot resize refuse.
  virtual Status set_cache_slots(std::uint32_t usable_slots) {
    return make_error(Errc::argument, "this data plane cannot resize its cache (asked for " +
                                          std::to_string(usable_slots) + " slots)");
  }
  virtual void reclaim_dead_clients() = 0;
  // {"totals": {hits, misses, bytes_read, queue_depth, direct_io, io_uring, slots_used, latency_us_log2[]},
  //  "clients": [{"client_idx", hits, misses, bytes_read, ...}]}; IoServerPlane's is
  //  stats_json(IoServer::stats()) (ioserver/data_plane/stats.cpp).
  [[nodiscard]] virtual nlohmann::json stats() const = 0;
  virtual Status set_policy(std::string_view policy) = 0;   // "echo" | "reuse" | "lfru" | "lru"
  virtual void stop() = 0;                                   // idempotent
};

// Gets DaemonOptions::io with container (canonical), instance and arena_slots filled in by the
// daemon's set-up.
using DataPlaneFactory = std::function<Result<std::unique_ptr<DataPlane>>(const IoServerConfig&)>;

// The real data path (IoServer::create(config)). Defined in io_server_plane.cpp.
Result<std::unique_ptr<DataPlane>> make_io_server_plane(const IoServerConfig& config);

}  // namespace waste::ioserver

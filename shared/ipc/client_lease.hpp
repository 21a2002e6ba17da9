// What a client needs to use an ioserver instance's data path after attaching: which client
// block and rings are its own and which segments to map. Produced by IoServer::attach, carried
// to the client by the control plane (shared/ipc/protocol), consumed by DaemonExpertSource.
#pragma once

#include <cstdint>
#include <string>

namespace waste::ipc {

struct ClientLease {
  int client_idx = -1;             // index of the client block and ring pair
  std::uint64_t generation = 0;    // ClientShm::generation at attach: detects a reclaimed lease
  std::string segment_name;        // arena segment (rings, slot table, arena)
  std::string trunk_segment_name;  // empty when the daemon serves no trunk image
  std::uint64_t trunk_bytes = 0;
  int daemon_pid = 0;
  std::string daemon_log;          // the daemon's log file (named in "is gone" errors); may be empty
};

}  // namespace waste::ipc

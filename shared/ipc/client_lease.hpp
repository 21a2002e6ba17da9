// What a client needs to use an ioserver instance's data path after attaching: which client
// block and rings are its own and which segments to map. Produced by IoServer::attach, carried
// to the client by the control plane (shared/ipc/protocol; the fields beyond the two segment
// names travel as the attach reply's ipc::Lease), consumed by DaemonExpertSource.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace waste::ipc {

// An IoServer running with private (anonymous) memory hands its in-process client the mappings
// themselves instead of names. keep_alive holds them (they outlive the IoServer if need be).
struct PrivateMappings {
  std::span<const std::byte> arena;  // the client reads it only
  std::span<std::byte> rings;        // this lease's RingSegmentShm
  std::span<std::byte> wake;         // WakeShm
  std::span<const std::byte> trunk;  // empty without a trunk image
  std::shared_ptr<const void> keep_alive;
};

struct ClientLease {
  int client_idx = -1;             // index of the client block
  std::uint64_t generation = 0;    // ClientShm::generation at attach: detects a reclaimed lease
  int pid = 0;                     // the process the lease was granted to (detach carries it)
  std::string segment_name;        // arena segment (header, slot table, client blocks, slots): read-only
  std::string ring_segment_name;   // this lease's rings; empty: derived from segment_name
  std::string wake_segment_name;   // the daemon's doorbell; empty: derived from segment_name
  std::string trunk_segment_name;  // empty when the daemon serves no trunk image
  std::string shm_dir;             // directory of the segment files; empty: /dev/shm
  std::uint64_t trunk_bytes = 0;
  int daemon_pid = 0;
  std::string daemon_log;          // the daemon's log file (named in "is gone" errors); may be empty
  std::shared_ptr<const PrivateMappings> mappings;  // set only by an in-process, private-memory IoServer
};

}  // namespace waste::ipc

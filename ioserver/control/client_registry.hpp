// The daemon's view of its attached clients: pid and start time, lease generation, declared
// state bytes, last heartbeat (informational only). A client is reclaimed only when its process
// is verifiably dead (pid + start time, so a reused pid is not mistaken for it), never for a late
// heartbeat: a machine that pages, or a client stopped with SIGSTOP, may be silent for seconds
// while it still maps slot bytes.
// Not thread-safe: the control loop is its only user.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

namespace waste::ioserver {

struct ClientEntry {
  int client_idx = -1;
  int pid = 0;
  std::uint64_t start_ticks = 0;   // the pid's start time at attach (0 = unknown: pid only)
  std::uint64_t generation = 0;    // the data plane's lease generation for this index
  std::uint64_t state_bytes = 0;
  std::chrono::steady_clock::time_point last_heartbeat;
  std::chrono::system_clock::time_point attached_at;
};

class ClientRegistry {
 public:
  using Clock = std::chrono::steady_clock;
  // (pid, start_ticks) -> is that process still running
  using AliveFn = std::function<bool(int pid, std::uint64_t start_ticks)>;

  void add(ClientEntry entry) { clients_[entry.client_idx] = entry; }
  void remove(int client_idx) { clients_.erase(client_idx); }
  // false when the index is unknown or the pid does not match the attach.
  bool touch(int client_idx, int pid, Clock::time_point now);
  // The entry at `client_idx` when it is that pid's lease of that generation, else nullptr
  // (a stale detach: the index was reclaimed and given to someone else, or never held).
  [[nodiscard]] const ClientEntry* occupant(int client_idx, int pid, std::uint64_t generation) const;
  // Clients whose process is dead (per `alive`). Heartbeat age plays no part.
  [[nodiscard]] std::vector<int> dead(const AliveFn& alive) const;
  [[nodiscard]] const std::map<int, ClientEntry>& clients() const noexcept { return clients_; }
  [[nodiscard]] bool empty() const noexcept { return clients_.empty(); }

 private:
  std::map<int, ClientEntry> clients_;
};

}  // namespace waste::ioserver

// The daemon's view of its attached clients: pid, declared state bytes, last heartbeat.
// A client is reclaimed when its pid is gone or its heartbeat is older than the timeout.
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
  std::uint64_t state_bytes = 0;
  std::chrono::steady_clock::time_point last_heartbeat;
  std::chrono::system_clock::time_point attached_at;
};

class ClientRegistry {
 public:
  using Clock = std::chrono::steady_clock;

  void add(ClientEntry entry) { clients_[entry.client_idx] = entry; }
  void remove(int client_idx) { clients_.erase(client_idx); }
  // false when the index is unknown or the pid does not match the attach.
  bool touch(int client_idx, int pid, Clock::time_point now);
  // Clients whose pid is dead (per `alive`) or whose last heartbeat is older than `timeout`.
  [[nodiscard]] std::vector<int> expired(Clock::time_point now, std::chrono::milliseconds timeout,
                                         const std::function<bool(int pid)>& alive) const;
  [[nodiscard]] const std::map<int, ClientEntry>& clients() const noexcept { return clients_; }
  [[nodiscard]] bool empty() const noexcept { return clients_.empty(); }

 private:
  std::map<int, ClientEntry> clients_;
};

}  // namespace waste::ioserver

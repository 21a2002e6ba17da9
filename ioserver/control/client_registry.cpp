#include "ioserver/control/client_registry.hpp"

namespace waste::ioserver {

bool ClientRegistry::touch(int client_idx, int pid, Clock::time_point now) {
  const auto it = clients_.find(client_idx);
  if (it == clients_.end() || it->second.pid != pid) return false;
  it->second.last_heartbeat = now;
  return true;
}

std::vector<int> ClientRegistry::expired(Clock::time_point now, std::chrono::milliseconds timeout,
                                         const std::function<bool(int pid)>& alive) const {
  std::vector<int> out;
  for (const auto& [idx, entry] : clients_) {
    if (!alive(entry.pid) || now - entry.last_heartbeat > timeout) out.push_back(idx);
  }
  return out;
}

}  // namespace waste::ioserver

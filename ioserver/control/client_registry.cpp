#include "ioserver/control/client_registry.hpp"

namespace waste::ioserver {

bool ClientRegistry::touch(int client_idx, int pid, Clock::time_point now) {
  const auto it = clients_.find(client_idx);
  if (it == clients_.end() || it->second.pid != pid) return false;
  it->second.last_heartbeat = now;
  return true;
}

const ClientEntry* ClientRegistry::occupant(int client_idx, int pid, std::uint64_t generation) const {
  const auto it = clients_.find(client_idx);
  if (it == clients_.end() || it->second.pid != pid || it->second.generation != generation) return nullptr;
  return &it->second;
}

std::vector<int> ClientRegistry::dead(const AliveFn& alive) const {
  std::vector<int> out;
  for (const auto& [idx, entry] : clients_) {
    if (!alive(entry.pid, entry.start_ticks)) out.push_back(idx);
  }
  return out;
}

}  // namespace waste::ioserver

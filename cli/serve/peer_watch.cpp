#include "cli/serve/peer_watch.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace waste::serve {

namespace {

// Numeric host and port of an address, formatted the way httplib formats its own.
bool host_port(const sockaddr_storage& addr, socklen_t len, std::string& host, int& port) {
  char name[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, name, sizeof name, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  host = name;
  port = std::atoi(serv);
  return true;
}

}  // namespace

std::optional<PeerWatch> PeerWatch::find(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                         int remote_port) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    char* end = nullptr;
    const long fd = std::strtol(entry.path().filename().c_str(), &end, 10);
    if (end == nullptr || *end != '\0' || fd < 0) continue;
    struct stat st {};
    if (fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    std::string host;
    int port = 0;
    if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&addr), &len) != 0 || !host_port(addr, len, host, port)) continue;
    if (port != local_port || host != local_addr) continue;
    len = sizeof addr;
    if (getpeername(int(fd), reinterpret_cast<sockaddr*>(&addr), &len) != 0 || !host_port(addr, len, host, port)) continue;
    if (port == remote_port && host == remote_addr) return PeerWatch(int(fd));
  }
  return std::nullopt;
}

bool PeerWatch::gone() const {
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace waste::serve

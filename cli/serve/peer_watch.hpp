// PeerWatch: notices that the client of a blocking (non-streamed) request has gone, so its
// sequence is cancelled within a wait slice instead of decoding to max_tokens for nobody.
// cpp-httplib 0.11 (Debian 12) gives a handler no access to its socket, so the socket is found
// once per request among this process's descriptors by the connection's four-tuple (unique
// among live TCP sockets). The descriptor stays this connection's while the handler runs:
// httplib closes it on the same thread, after the handler returns.
#pragma once

#include <optional>
#include <string>

namespace waste::serve {

class PeerWatch {
 public:
  // The socket whose local and peer address/port are these; nullopt when none matches (then
  // the caller simply never learns of a disconnect, as before).
  static std::optional<PeerWatch> find(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                       int remote_port);
  // True once the peer has closed or reset the connection (POLLRDHUP / POLLHUP / POLLERR). A
  // client that half-closes its side after sending the request counts as gone (no HTTP client
  // of this API does that).
  [[nodiscard]] bool gone() const;
  [[nodiscard]] int fd() const { return fd_; }

 private:
  explicit PeerWatch(int fd) : fd_(fd) {}
  int fd_;  // not owned: httplib's
};

}  // namespace waste::serve

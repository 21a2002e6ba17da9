// A minimal blocking HTTP/1.1 client for the serve tests: one request per connection on
// 127.0.0.1 (Connection: close), the answer read to the close. Also raw sockets for the tests
// that send what no client library would (tests/serve/test_http_transport.cpp).
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <chrono>
#include <string>
#include <string_view>

namespace waste::serve::http_test {

// A connected loopback socket (-1 on failure); closed by the destructor.
class RawSocket {
 public:
  explicit RawSocket(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(std::uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;
  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] bool ok() const { return fd_ >= 0; }

  // Writes all of `bytes`; false when the peer is gone.
  bool send_all(std::string_view bytes) const {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(std::size_t(n));
    }
    return true;
  }
  // Reads until the peer closes or `timeout` passes; what came.
  [[nodiscard]] std::string read_all(std::chrono::milliseconds timeout) const {
    std::string out;
    const auto end = std::chrono::steady_clock::now() + timeout;
    char buf[16384];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return out;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, int(left.count())) <= 0) return out;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return out;
      out.append(buf, std::size_t(n));
    }
  }

 private:
  int fd_ = -1;
};

struct HttpAnswer {
  int status = 0;  // 0: no answer
  std::string head;
  std::string body;
};

inline HttpAnswer parse_answer(const std::string& text) {
  HttpAnswer a;
  if (text.rfind("HTTP/1.", 0) == 0 && text.size() >= 12) a.status = std::stoi(text.substr(9, 3));
  const auto split = text.find("\r\n\r\n");
  a.head = text.substr(0, split);
  if (split != std::string::npos) a.body = text.substr(split + 4);
  return a;
}

// POST `body` to `path` and read the answer (Content-Length framed, connection closed after).
inline HttpAnswer post(int port, const std::string& path, const std::string& body,
                       std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  RawSocket s(port);
  if (!s.ok()) return {};
  const std::string request = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                              "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                              "\r\n\r\n" + body;
  if (!s.send_all(request)) return {};
  return parse_answer(s.read_all(timeout));
}

}  // namespace waste::serve::http_test

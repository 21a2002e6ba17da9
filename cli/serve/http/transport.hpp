// The HTTP/1.x transport of `waste serve` on Boost.Beast + Asio: a listening socket with a bounded
// accept queue, at most max_connections connections, each read through request_parser.hpp's
// limits under one whole-request deadline, keep-alive bounded in idle time and requests, and
// replies written under a write deadline. A small fixed pool of I/O threads runs every
// connection (async, one strand each); nothing here blocks: deferred and streamed replies are
// polled on a timer, and the socket is watched meanwhile so a client that leaves is noticed.
// Routes are an HttpHandler (http_server.cpp); this file knows nothing of OpenAI.
#pragma once

#include <memory>
#include <string>

#include "cli/serve/http/limits.hpp"
#include "cli/serve/http/message.hpp"
#include "shared/result.hpp"

namespace waste::serve::http {

class HttpTransport {
 public:
  // `handler` must outlive stop().
  HttpTransport(HttpLimits limits, HttpHandler& handler);
  ~HttpTransport();  // stop()
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Bind and listen (port 0: any free port), then start the I/O threads. Error names host:port.
  Status start(const std::string& host, int port);
  [[nodiscard]] int port() const;
  // Connections open now (for tests and /metrics).
  [[nodiscard]] int connections() const;
  // Stop accepting, close idle connections, let answers in progress end (bounded by the write
  // deadline), then stop the I/O threads and join them.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace waste::serve::http

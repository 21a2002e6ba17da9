// The bounds the HTTP transport enforces before a request reaches a route (docs/design/serve.md,
// HTTP transport). Every one is a `waste serve` option; the defaults are these.
#pragma once

#include <cstddef>

namespace waste::serve::http {

struct HttpLimits {
  std::size_t header_bytes = 16u << 10;  // request line + header fields; beyond: 431 and close
  std::size_t max_headers = 100;         // header fields; beyond: 431 and close
  std::size_t body_bytes = 4u << 20;     // decoded body, Content-Length or chunked; beyond: 413 and close
  int request_seconds = 30;              // first byte to last byte of one request; beyond: 400 (or close)
  int write_seconds = 30;                // one write of a response (an SSE event); beyond: close
  // Idle wait for the next request on a kept connection: above nginx's upstream keepalive_timeout
  // (60 s), so a proxy never reuses a connection this side is closing (a POST would get 502).
  int keep_alive_seconds = 65;
  int keep_alive_requests = 1000;        // requests per connection; the last one answers Connection: close
  int max_connections = 256;             // open at once; past that a new one gets 503 and is closed
  int accept_queue = 128;                // the listen() backlog (the kernel caps it at somaxconn)
  int io_threads = 2;                    // threads running the connections (asio io_context)
  int linger_seconds = 2;                // after an error answer: read and discard what the client still sends
  // How often a deferred or streamed answer is polled when it has not woken the connection
  // (StreamedBody::set_waker): pings, a gone client, answers without a waker. Not a flag.
  int poll_ms = 10;
};

}  // namespace waste::serve::http

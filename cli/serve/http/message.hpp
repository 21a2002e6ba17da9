// What the transport hands a route and what a route hands back. The transport (transport.*) owns
// sockets, limits and framing; routes (http_server.cpp, generation_route.cpp) see only these.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace waste::serve::http {

struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string path;           // the target without its query
  std::string authorization;  // the Authorization field ("" when absent)
  std::string body;           // decoded (chunked or not), at most HttpLimits::body_bytes
  unsigned version = 11;      // 10 or 11
};

struct Reply;

// A blocking answer that is not ready yet (a non-streamed generation). The transport polls it on
// its own timer, never blocking an I/O thread, and watches the socket meanwhile.
class DeferredReply {
 public:
  virtual ~DeferredReply() = default;
  // The complete reply once there is one (called on an I/O thread; must not block).
  virtual std::optional<Reply> poll() = 0;
  // The client closed its connection: the answer will not be read.
  virtual void client_gone() = 0;
  // `wake` (callable from any thread) makes the transport poll now rather than at its next tick;
  // an answer that knows when it has news calls it then. Called once, before the first poll.
  virtual void set_waker(std::function<void()> wake) { (void)wake; }
};

// A body produced over time (SSE). The head (status 200 and the reply's headers) is sent first,
// then whatever poll() appends, as chunks (HTTP/1.1) or until close (HTTP/1.0).
class StreamedBody {
 public:
  virtual ~StreamedBody() = default;
  // Appends the bytes to send now to `out` (may append nothing); true once the body is complete.
  // Called on an I/O thread; must not block.
  virtual bool poll(std::string& out) = 0;
  virtual void client_gone() = 0;
  // As DeferredReply::set_waker: a body that calls `wake` when it has bytes is sent without
  // waiting for the transport's next tick.
  virtual void set_waker(std::function<void()> wake) { (void)wake; }
};

struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type/Length, Connection
  std::string body;
  std::shared_ptr<DeferredReply> deferred;  // set: the reply comes later (everything else ignored)
  std::shared_ptr<StreamedBody> stream;     // set: `body` is ignored, the body comes from here
};

// How a route answers: once, from any thread (the transport moves it to the connection's strand).
using Respond = std::function<void(Reply)>;

// A request the transport refuses by itself, before any route sees it.
struct Refusal {
  int status = 400;     // 400, 404, 413, 431, 503
  std::string message;  // names the limit and its value
  std::string code;     // OpenAI "code" ("" => null)
  std::string path;     // the target, when the head was read far enough
};

// The routes, as the transport sees them.
class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // A complete request within the limits. Called on an I/O thread: answer at once, or hand the
  // work to another thread and call `respond` from there.
  virtual void handle(HttpRequest request, Respond respond) = 0;
  // The body of a refusal (OpenAI error JSON); also where refusals are counted.
  virtual Reply refuse(const Refusal& refusal) = 0;
};

}  // namespace waste::serve::http

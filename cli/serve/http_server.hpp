// The HTTP side of `waste serve` (cpp-httplib): routes, the API key, the body cap, OpenAI error
// objects for every 4xx/5xx, SSE streaming, and the loading -> ready -> draining phases.
// Requests are parsed, tokenized and admitted on the HTTP threads; generation happens on the
// scheduler's engine thread, and each HTTP thread waits on its request's RequestStream.
// Nothing a request says reads a local file or fetches a URL (images come as data: URLs only).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cli/serve/chat_media.hpp"
#include "cli/serve/metrics.hpp"
#include "cli/serve/output_constraint.hpp"
#include "cli/serve/scheduler.hpp"
#include "compute/tokenizer/chat_format.hpp"
#include "compute/tokenizer/tokenizer.hpp"
#include "shared/result.hpp"

namespace httplib {
class Server;
}

namespace waste::serve {

struct ServeConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                       // 0 = any free port (see HttpServer::port())
  std::string api_key;                   // "" = no key needed
  std::string model_id;                  // the id /v1/models lists and requests must name
  std::size_t max_body_bytes = 4u << 20; // larger bodies get 413
  int read_timeout_seconds = 10;         // a request whose headers or body stall longer gets 400 / is dropped
  int http_threads = 16;                 // connections served at once
};

// What a ready server generates with; every pointer outlives the server's stop().
struct ServeModel {
  Scheduler* scheduler = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatFormat* chat_format = nullptr;  // null: chat requests get 400 (no chat.json)
  // The grammar engine's view of the vocabulary (null: constrained requests get 400).
  std::shared_ptr<const grammar::TokenIndex> token_index;
  ServeVision vision;  // tower null: image_url parts get 400
};

enum class Phase : std::uint8_t { loading, ready, draining };

class HttpServer {
 public:
  HttpServer(ServeConfig config, Metrics& metrics);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Bind and start answering on a thread of its own (503 until ready()). Error names host:port.
  Status start();
  [[nodiscard]] int port() const { return port_; }
  void ready(ServeModel model);  // from now on requests generate
  void draining();               // new generation requests get 503; streams in flight go on
  void stop();                   // stop listening, finish the open connections, join
  [[nodiscard]] Phase phase() const { return phase_.load(std::memory_order_acquire); }

 private:
  void install_routes();

  ServeConfig config_;
  Metrics& metrics_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  int port_ = 0;
  // Writer: ready()/draining() (release); readers: the HTTP threads (acquire). model_ is set
  // before phase_ becomes ready and never changes after, so a reader that saw ready sees it.
  std::atomic<Phase> phase_{Phase::loading};
  ServeModel model_;
  std::int64_t created_ = 0;
};

}  // namespace waste::serve

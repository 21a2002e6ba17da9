// The HTTP side of `waste serve`: the routes, the API key, OpenAI error objects for every 4xx/5xx
// (the transport's own refusals included), and the loading -> ready -> draining phases. Sockets,
// limits and framing are the transport's (http/transport.hpp); generation requests are admitted
// here (a place in the scheduler, 429 before any parsing), then built and submitted on a small
// worker pool (generation_route.hpp) and answered by the transport polling their RequestStream.
// Nothing a request says reads a local file or fetches a URL (images come as data: URLs only).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cli/serve/generation_route.hpp"
#include "cli/serve/http/limits.hpp"
#include "cli/serve/http/message.hpp"
#include "cli/serve/metrics.hpp"
#include "cli/serve/model_set.hpp"
#include "shared/result.hpp"

namespace boost::asio {
class thread_pool;
}

namespace waste::serve {

namespace http {
class HttpTransport;
}

struct ServeConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                // 0 = any free port (see HttpServer::port())
  std::string api_key;            // "" = no key needed
  std::string model_id;           // one model (MODEL, or ready(ServeModel)): its id, listed while loading
  bool metrics_public = false;    // with a key: /metrics without it too
  // Several models (--model): /v1/models shows each one's "status", /metrics labels each
  // model's series with model="ID" and adds the models' states. The positional MODEL form keeps
  // the unlabelled series it always had.
  bool several_models = false;
  http::HttpLimits limits;        // header/body sizes, deadlines, connections, I/O threads
  int worker_threads = 2;         // parse, grammar, images and submit of admitted generation requests
};

enum class Phase : std::uint8_t { loading, ready, draining };

class HttpServer final : public http::HttpHandler {
 public:
  HttpServer(ServeConfig config, Metrics& metrics);
  ~HttpServer() override;  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Bind and start answering on threads of its own (503 until ready()). Error names host:port.
  Status start();
  [[nodiscard]] int port() const { return port_; }
  void ready(ModelSet& models);  // from now on requests generate (`models` outlives stop())
  // One model the caller owns and never unloads, under config.model_id (its scheduler outlives
  // the server's stop(); the caller stops it).
  void ready(ServeModel model);
  void draining();               // new generation requests get 503; streams in flight go on
  void stop();                   // stop listening, finish the open answers, join
  [[nodiscard]] Phase phase() const { return phase_.load(std::memory_order_acquire); }

 private:
  void handle(http::HttpRequest request, http::Respond respond) override;
  http::Reply refuse(const http::Refusal& refusal) override;
  http::Reply route(const http::HttpRequest& request);  // everything but generation
  void generate(Endpoint endpoint, http::HttpRequest request, http::Respond respond);
  // On a worker: the body parsed, its model found (404), a place taken or its load awaited.
  http::Reply parse_and_answer(Endpoint endpoint, const std::string& body);
  http::Reply answer(Endpoint endpoint, const std::shared_ptr<const ParsedRequest>& parsed, ModelSet::Acquired got);
  [[nodiscard]] bool authorized(const http::HttpRequest& request) const;

  ServeConfig config_;
  Metrics& metrics_;
  std::unique_ptr<boost::asio::thread_pool> workers_;
  std::unique_ptr<http::HttpTransport> transport_;
  int port_ = 0;
  // Writer: ready()/draining() (release); readers: the I/O and worker threads (acquire). models_
  // is set before phase_ becomes ready and never changes after, so a reader that saw ready sees it.
  std::atomic<Phase> phase_{Phase::loading};
  ModelSet* models_ = nullptr;
  std::unique_ptr<ModelSet> own_models_;  // ready(ServeModel)'s
  std::int64_t created_ = 0;
};

}  // namespace waste::serve

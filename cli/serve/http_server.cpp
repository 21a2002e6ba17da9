#include "cli/serve/http_server.hpp"

#include <ctime>
#include <exception>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "cli/serve/api_key.hpp"
#include "cli/serve/api_reply.hpp"
#include "cli/serve/http/transport.hpp"
#include "cli/serve/openai_response.hpp"

namespace waste::serve {
namespace {

using nlohmann::json;

ApiError unavailable(std::string message) {
  return ApiError{503, std::move(message), "service_unavailable_error", "", ""};
}

std::string route_label(const std::string& path) {
  for (const char* known : {"/health", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions"}) {
    if (path == known) return known;
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

// Counts a deferred answer when its reply is known (or 499 when its client left first).
class CountedAnswer final : public http::DeferredReply {
 public:
  CountedAnswer(std::shared_ptr<http::DeferredReply> inner, Metrics& metrics, std::string route)
      : inner_(std::move(inner)), metrics_(metrics), route_(std::move(route)) {}
  std::optional<http::Reply> poll() override {
    std::optional<http::Reply> reply = inner_->poll();
    if (reply) metrics_.count_request(route_, reply->status);
    return reply;
  }
  void client_gone() override {
    inner_->client_gone();
    metrics_.count_request(route_, 499);  // nginx's "client closed request"
  }

 private:
  std::shared_ptr<http::DeferredReply> inner_;
  Metrics& metrics_;
  std::string route_;
};

}  // namespace

HttpServer::HttpServer(ServeConfig config, Metrics& metrics)
    : config_(std::move(config)), metrics_(metrics), created_(std::int64_t(std::time(nullptr))) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
  workers_ = std::make_unique<boost::asio::thread_pool>(std::size_t(std::max(1, config_.worker_threads)));
  transport_ = std::make_unique<http::HttpTransport>(config_.limits, *this);
  if (Status started = transport_->start(config_.host, config_.port); !started) return started;
  port_ = transport_->port();
  return ok();
}

void HttpServer::ready(ServeModel model) {
  model_ = model;
  phase_.store(Phase::ready, std::memory_order_release);
}

void HttpServer::draining() { phase_.store(Phase::draining, std::memory_order_release); }

void HttpServer::stop() {
  if (transport_) transport_->stop();  // answers in progress end; no new request is read
  if (workers_) workers_->join();
  transport_.reset();
  workers_.reset();
}

bool HttpServer::authorized(const http::HttpRequest& request) const {
  if (config_.api_key.empty()) return true;
  const bool guarded = request.path.rfind("/v1/", 0) == 0 || (request.path == "/metrics" && !config_.metrics_public);
  return !guarded || authorization_matches(request.authorization, config_.api_key);
}

http::Reply HttpServer::refuse(const http::Refusal& refusal) {
  const char* type = refusal.status >= 500 ? "service_unavailable_error" : "invalid_request_error";
  metrics_.count_request(route_label(refusal.path), refusal.status);
  return error_reply(ApiError{refusal.status, refusal.message, type, "", refusal.code});
}

void HttpServer::handle(http::HttpRequest request, http::Respond respond) {
  const std::string label = route_label(request.path);
  if (!authorized(request)) {
    metrics_.count_request(label, 401);
    return respond(error_reply(ApiError{401, "invalid or missing API key (Authorization: Bearer KEY)",
                                        "authentication_error", "", "invalid_api_key"}));
  }
  if (request.method == "POST" && (request.path == "/v1/chat/completions" || request.path == "/v1/completions")) {
    const Endpoint endpoint = request.path == "/v1/chat/completions" ? Endpoint::chat : Endpoint::completion;
    return generate(endpoint, std::move(request), std::move(respond));
  }
  http::Reply reply;
  try {
    reply = route(request);
  } catch (const std::exception& e) {  // never out of an I/O thread
    reply = error_reply(ApiError{500, std::string("internal error: ") + e.what(), "server_error", "", ""});
  }
  metrics_.count_request(label, reply.status);
  respond(std::move(reply));
}

http::Reply HttpServer::route(const http::HttpRequest& request) {
  const std::string& path = request.path;
  const bool get = request.method == "GET";
  if (get && path == "/health") {
    switch (phase()) {
      case Phase::loading: return error_reply(unavailable("loading model"));
      case Phase::draining: return error_reply(unavailable("draining"));
      case Phase::ready: return json_reply(200, json{{"status", "ok"}});
    }
  }
  if (get && path == "/metrics") {
    const Scheduler* scheduler = phase() == Phase::loading ? nullptr : model_.scheduler;
    http::Reply reply;
    reply.content_type = "text/plain; version=0.0.4";
    reply.body = metrics_.render(scheduler);
    return reply;
  }
  if (get && path == "/v1/models") return json_reply(200, models_json(config_.model_id, created_));
  if (get && path.rfind("/v1/models/", 0) == 0 && path.size() > 11) {
    const std::string id = path.substr(11);
    if (id != config_.model_id) {
      return error_reply(ApiError{404, "model '" + id + "' does not exist", "invalid_request_error", "model",
                                  "model_not_found"});
    }
    return json_reply(200, model_json(config_.model_id, created_));
  }
  return error_reply(ApiError{404, "no route " + request.method + " " + path, "not_found_error", "", ""});
}

// Admission first: a place in the scheduler (429 past the queue, 503 loading or draining) before
// a byte of the body is parsed; the parse, grammar, images and submit run on a worker.
void HttpServer::generate(Endpoint endpoint, http::HttpRequest request, http::Respond respond) {
  const std::string label = route_label(request.path);
  const auto refuse_now = [&](const ApiError& error) {
    metrics_.count_request(label, error.status);
    respond(error_reply(error));
  };
  const Phase now = phase();
  if (now != Phase::ready) return refuse_now(unavailable(now == Phase::loading ? "loading model" : "draining"));
  auto ticket = model_.scheduler->reserve();
  if (!ticket) return refuse_now(ticket.error());
  boost::asio::post(*workers_, [this, endpoint, label, request = std::move(request), respond = std::move(respond),
                                ticket = std::move(*ticket)]() mutable {
    http::Reply reply;
    try {
      reply = generation_reply(endpoint, request.body, model_, config_.model_id, std::move(ticket));
    } catch (const std::exception& e) {  // never out of a worker (it would end the process)
      reply = error_reply(ApiError{500, std::string("internal error: ") + e.what(), "server_error", "", ""});
    }
    if (reply.deferred) {
      reply.deferred = std::make_shared<CountedAnswer>(std::move(reply.deferred), metrics_, label);
    } else {
      metrics_.count_request(label, reply.status);
    }
    respond(std::move(reply));
  });
}

}  // namespace waste::serve

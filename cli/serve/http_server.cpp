#include "cli/serve/http_server.hpp"

#include <ctime>
#include <exception>
#include <mutex>

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
    if (reply && reply->deferred) {  // answered later still (a request that waited for its model)
      reply->deferred = std::make_shared<CountedAnswer>(std::move(reply->deferred), metrics_, route_);
    } else if (reply) {
      metrics_.count_request(route_, reply->status);
    }
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

// A request whose model is being loaded: nothing is sent while it waits (the status depends on the
// load: 507 or 500 when it fails); once the load is over, `next` (the place claimed and the reply
// built) runs on a worker, and its reply is this one's.
class AwaitModel final : public http::DeferredReply {
 public:
  using Next = std::function<http::Reply(ModelSet::Waiter)>;
  AwaitModel(ModelSet::Waiter waiter, Next next, boost::asio::thread_pool& workers)
      : waiter_(std::move(waiter)), next_(std::move(next)), workers_(workers), state_(std::make_shared<State>()) {}
  ~AwaitModel() override { client_gone(); }

  std::optional<http::Reply> poll() override {
    if (!posted_) {
      if (!waiter_.done()) return std::nullopt;
      posted_ = true;
      boost::asio::post(workers_, [state = state_, next = next_, waiter = std::move(waiter_)]() mutable {
        http::Reply reply;
        try {
          reply = next(std::move(waiter));
        } catch (const std::exception& e) {  // never out of a worker
          reply = error_reply(ApiError{500, std::string("internal error: ") + e.what(), "server_error", "", ""});
        }
        std::lock_guard lock(state->mutex);
        if (!state->gone) state->reply = std::move(reply);  // else dropped: its stream is cancelled
      });
      return std::nullopt;
    }
    std::lock_guard lock(state_->mutex);
    return std::exchange(state_->reply, std::nullopt);
  }
  void client_gone() override {
    std::optional<http::Reply> dropped;
    {
      std::lock_guard lock(state_->mutex);
      state_->gone = true;
      dropped = std::exchange(state_->reply, std::nullopt);
    }
    if (dropped && dropped->deferred) dropped->deferred->client_gone();
    if (dropped && dropped->stream) dropped->stream->client_gone();
    if (!posted_) waiter_ = ModelSet::Waiter();  // no longer waiting
  }

 private:
  struct State {
    std::mutex mutex;
    std::optional<http::Reply> reply;
    bool gone = false;
  };
  ModelSet::Waiter waiter_;
  Next next_;
  boost::asio::thread_pool& workers_;
  std::shared_ptr<State> state_;
  bool posted_ = false;  // poll() and client_gone() run on the connection's strand
};

// ready(ServeModel)'s model: pointers the caller owns.
struct BorrowedModel final : LoadedModel {};

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

void HttpServer::ready(ModelSet& models) {
  models_ = &models;
  phase_.store(Phase::ready, std::memory_order_release);
}

void HttpServer::ready(ServeModel model) {
  ModelSpec spec{"", config_.model_id};
  own_models_ = std::make_unique<ModelSet>(
      std::vector<ModelConfig>{{spec, {}}}, ModelSetOptions{},
      [model](const ModelSpec&, std::uint64_t) -> Result<std::unique_ptr<LoadedModel>> {
        auto borrowed = std::make_unique<BorrowedModel>();
        borrowed->serve = model;
        return std::unique_ptr<LoadedModel>(std::move(borrowed));
      });
  (void)own_models_->load_now(config_.model_id);
  ready(*own_models_);
}

void HttpServer::draining() { phase_.store(Phase::draining, std::memory_order_release); }

void HttpServer::stop() {
  if (transport_) transport_->stop();  // answers in progress end; no new request is read
  if (workers_) workers_->join();
  transport_.reset();
  workers_.reset();
  if (own_models_) own_models_->stop();
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
    http::Reply reply;
    reply.content_type = "text/plain; version=0.0.4";
    reply.body = metrics_.render(phase() == Phase::loading ? nullptr : models_, config_.several_models);
    return reply;
  }
  const bool loading = phase() == Phase::loading;
  if (get && path == "/v1/models") {
    if (loading) {
      json one = config_.several_models ? model_json(config_.model_id, created_, "loading")
                                        : model_json(config_.model_id, created_);
      return json_reply(200, json{{"object", "list"}, {"data", json::array({one})}});
    }
    json data = json::array();
    models_->visit([&](const ModelView& m) { data.push_back(model_json(m.id, created_, state_name(m.state))); });
    return json_reply(200, json{{"object", "list"}, {"data", std::move(data)}});
  }
  if (get && path.rfind("/v1/models/", 0) == 0 && path.size() > 11) {
    const std::string id = path.substr(11);
    if (loading ? id != config_.model_id : !models_->contains(id)) {
      return error_reply(ApiError{404, "model '" + id + "' does not exist", "invalid_request_error", "model",
                                  "model_not_found"});
    }
    if (loading) return json_reply(200, model_json(config_.model_id, created_, "loading"));
    return json_reply(200, model_json(id, created_, state_name(models_->state(id))));
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
  const auto finish = [this, label](http::Reply reply, const http::Respond& respond) {
    if (reply.deferred) {
      reply.deferred = std::make_shared<CountedAnswer>(std::move(reply.deferred), metrics_, label);
    } else {
      metrics_.count_request(label, reply.status);
    }
    respond(std::move(reply));
  };
  // One model, loaded: its place first (429 before any parsing), as a single-model server does.
  if (models_->ids().size() == 1) {
    const std::string& only = models_->ids().front();
    ModelSet::Acquired got = models_->acquire(only, /*start_load=*/false);
    if (auto* error = std::get_if<ApiError>(&got)) return refuse_now(*error);
    if (auto* place = std::get_if<ModelSet::Place>(&got)) {
      boost::asio::post(*workers_, [this, endpoint, finish, request = std::move(request), respond = std::move(respond),
                                    place = std::move(*place), only]() mutable {
        http::Reply reply;
        try {
          reply = generation_reply(endpoint, request.body, place.model, only, std::move(place.ticket));
        } catch (const std::exception& e) {  // never out of a worker (it would end the process)
          reply = error_reply(ApiError{500, std::string("internal error: ") + e.what(), "server_error", "", ""});
        }
        finish(std::move(reply), respond);
      });
      return;
    }
  }
  // Several models, or one that is not loaded: the body says which; its place (or its load) after.
  boost::asio::post(*workers_, [this, endpoint, finish, request = std::move(request),
                                respond = std::move(respond)]() mutable {
    http::Reply reply;
    try {
      reply = parse_and_answer(endpoint, request.body);
    } catch (const std::exception& e) {  // never out of a worker (it would end the process)
      reply = error_reply(ApiError{500, std::string("internal error: ") + e.what(), "server_error", "", ""});
    }
    finish(std::move(reply), respond);
  });
}

http::Reply HttpServer::parse_and_answer(Endpoint endpoint, const std::string& body) {
  auto parsed = parse_request(endpoint, body);
  if (!parsed) return error_reply(parsed.error());
  if (!models_->contains(parsed->model)) return error_reply(models_->unknown_model(parsed->model));
  auto shared = std::make_shared<const ParsedRequest>(std::move(*parsed));
  return answer(endpoint, shared, models_->acquire(shared->model));
}

http::Reply HttpServer::answer(Endpoint endpoint, const std::shared_ptr<const ParsedRequest>& parsed,
                               ModelSet::Acquired got) {
  if (auto* error = std::get_if<ApiError>(&got)) return error_reply(*error);
  if (auto* place = std::get_if<ModelSet::Place>(&got)) {
    return parsed_generation_reply(endpoint, *parsed, place->model, parsed->model, std::move(place->ticket));
  }
  http::Reply reply;
  reply.deferred = std::make_shared<AwaitModel>(
      std::move(std::get<ModelSet::Waiter>(got)),
      [this, endpoint, parsed](ModelSet::Waiter waiter) {
        return answer(endpoint, parsed, models_->claim(std::move(waiter)));
      },
      *workers_);
  return reply;
}

}  // namespace waste::serve

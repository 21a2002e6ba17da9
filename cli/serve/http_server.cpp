#include "cli/serve/http_server.hpp"

#include <chrono>
#include <ctime>
#include <random>

#include <httplib.h>

#include "cli/serve/openai_request.hpp"
#include "cli/serve/openai_response.hpp"
#include "cli/serve/peer_watch.hpp"
#include "cli/serve/structured_output.hpp"
#include "cli/serve/tool_call_parser.hpp"

namespace waste::serve {
namespace {

using nlohmann::json;

constexpr auto kWaitSlice = std::chrono::milliseconds(250);  // a stream's wait between liveness checks
constexpr int kPingSlices = 8;                               // ": ping" after ~2 s of silence

void send_json(httplib::Response& res, int status, const json& doc) {
  res.status = status;
  res.set_content(dump(doc), "application/json");
}

void send_error(httplib::Response& res, const ApiError& error) {
  if (error.status == 429) res.set_header("Retry-After", "1");
  send_json(res, error.status, error_json(error));
}

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

// Ids are unique within a process and unpredictable across processes.
std::string response_id(const char* prefix) {
  static std::atomic<std::uint64_t> counter{std::random_device{}()};
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(counter.fetch_add(1) * 0x9E3779B97F4A7C15ULL));
  return std::string(prefix) + hex;
}

// The state one streamed answer keeps between calls of its content provider.
struct StreamState {
  std::shared_ptr<RequestStream> stream;
  ResponseIds ids;
  Endpoint endpoint = Endpoint::chat;
  bool include_usage = false;
  bool want_logprobs = false;
  std::optional<ToolCallParser> tools;  // chat with tools (tool_choice not none): calls are parsed out
  bool started = false;
  int silent_slices = 0;
};

// Writes the chunks for `deltas` (and, when finished, the finish chunk, usage and [DONE]).
// False when the client has gone (a write failed).
bool write_stream(StreamState& s, httplib::DataSink& sink, const std::vector<Delta>& deltas, bool finished) {
  auto write = [&](const std::string& text) { return sink.write(text.data(), text.size()); };
  if (!s.started) {
    s.started = true;
    if (s.endpoint == Endpoint::chat &&
        !write(sse_event(chat_chunk_json(s.ids, json{{"role", "assistant"}, {"content", ""}}, nullptr, s.include_usage)))) {
      return false;
    }
  }
  // Tool-call events become tool-call deltas; a token's logprobs go with its first chunk.
  auto write_events = [&](const std::vector<ToolCallEvent>& events, const std::vector<TokenLogprob>* lpp) {
    for (const ToolCallEvent& e : events) {
      if (!write(sse_event(chat_chunk_json(s.ids, tool_event_delta_json(e), nullptr, s.include_usage, lpp)))) return false;
      lpp = nullptr;
    }
    if (lpp && !write(sse_event(chat_chunk_json(s.ids, json{{"content", ""}}, nullptr, s.include_usage, lpp)))) {
      return false;
    }
    return true;
  };
  for (const Delta& d : deltas) {
    if (d.text.empty() && !(s.want_logprobs && d.logprob)) continue;  // held back: nothing to send yet
    std::vector<TokenLogprob> lp;
    if (s.want_logprobs && d.logprob) lp.push_back(*d.logprob);
    const std::vector<TokenLogprob>* lpp = lp.empty() ? nullptr : &lp;
    if (s.tools) {
      if (!write_events(s.tools->push(d.text), lpp)) return false;
      continue;
    }
    const json chunk = s.endpoint == Endpoint::chat
                           ? chat_chunk_json(s.ids, json{{"content", d.text}}, nullptr, s.include_usage, lpp)
                           : completion_chunk_json(s.ids, d.text, nullptr, s.include_usage, lpp);
    if (!write(sse_event(chunk))) return false;
  }
  if (!finished) return true;
  if (s.tools && !write_events(s.tools->finish(), nullptr)) return false;
  const bool tool_calls = s.tools && s.tools->calls() > 0;
  const Finish finish = s.stream->finish_reason();
  if (finish == Finish::error || finish == Finish::cancelled) {
    // Mid-stream failure: the portable form is a data event with a top-level "error".
    const ApiError error = finish == Finish::error ? ApiError{500, s.stream->error(), "server_error", "", ""}
                                                   : unavailable("the server stopped before the answer was complete");
    if (!write(sse_event(error_json(error)))) return false;
  } else {
    const json chunk = s.endpoint == Endpoint::chat
                           ? chat_chunk_json(s.ids, json::object(), finish_json(finish, tool_calls), s.include_usage)
                           : completion_chunk_json(s.ids, "", finish_json(finish), s.include_usage);
    if (!write(sse_event(chunk))) return false;
    if (s.include_usage &&
        !write(sse_event(usage_chunk_json(s.ids, s.endpoint, s.stream->prompt_tokens(), s.stream->completion_tokens())))) {
      return false;
    }
  }
  if (!write(std::string(kSseDone))) return false;
  sink.done();
  return true;
}

}  // namespace

HttpServer::HttpServer(ServeConfig config, Metrics& metrics)
    : config_(std::move(config)), metrics_(metrics), server_(std::make_unique<httplib::Server>()),
      created_(std::int64_t(std::time(nullptr))) {
  install_routes();
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
  const int threads = config_.http_threads;
  // httplib takes ownership of the queue it is given (its interface is a raw pointer).
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(std::size_t(threads)); };
  server_->set_payload_max_length(config_.max_body_bytes);
  server_->set_read_timeout(config_.read_timeout_seconds, 0);
  server_->set_write_timeout(config_.read_timeout_seconds, 0);
  server_->set_keep_alive_timeout(config_.read_timeout_seconds);
  if (config_.port == 0) {
    port_ = server_->bind_to_any_port(config_.host);
    if (port_ <= 0) return make_error(Errc::io, "cannot bind " + config_.host + ": no free port");
  } else {
    if (!server_->bind_to_port(config_.host, config_.port)) {
      return make_error(Errc::io, "cannot bind " + config_.host + ":" + std::to_string(config_.port));
    }
    port_ = config_.port;
  }
  listener_ = std::thread([this] { server_->listen_after_bind(); });
  return ok();
}

void HttpServer::ready(ServeModel model) {
  model_ = model;
  phase_.store(Phase::ready, std::memory_order_release);
}

void HttpServer::draining() { phase_.store(Phase::draining, std::memory_order_release); }

void HttpServer::stop() {
  if (server_) server_->stop();
  if (listener_.joinable()) listener_.join();
}

void HttpServer::install_routes() {
  httplib::Server& s = *server_;
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.count_request(route_label(req.path), res.status);
  });
  // Only errors without a body come here unfilled (httplib's own 400/404/413, ...): give them the
  // OpenAI shape too.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    switch (res.status) {
      case 404:
        send_error(res, ApiError{404, "no route " + req.method + " " + req.path, "not_found_error", "", ""});
        break;
      case 413:
        send_error(res, ApiError{413, "request body over the size limit", "invalid_request_error", "", "payload_too_large"});
        break;
      default:
        send_error(res, ApiError{res.status, "bad request (" + std::to_string(res.status) + ")",
                                 res.status >= 500 ? "server_error" : "invalid_request_error", "", ""});
    }
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr e) {
    std::string what = "internal error";
    try {
      if (e) std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    send_error(res, ApiError{500, what, "server_error", "", ""});
  });
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (config_.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + config_.api_key) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    send_error(res, ApiError{401, "invalid or missing API key (Authorization: Bearer KEY)", "authentication_error", "",
                             "invalid_api_key"});
    return httplib::Server::HandlerResponse::Handled;
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    switch (phase()) {
      case Phase::loading: return send_error(res, unavailable("loading model"));
      case Phase::draining: return send_error(res, unavailable("draining"));
      case Phase::ready: return send_json(res, 200, json{{"status", "ok"}});
    }
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    const Scheduler* scheduler = phase() == Phase::loading ? nullptr : model_.scheduler;
    res.set_content(metrics_.render(scheduler), "text/plain; version=0.0.4");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, models_json(config_.model_id, created_));
  });
  s.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (id != config_.model_id) {
      return send_error(res, ApiError{404, "model '" + id + "' does not exist", "invalid_request_error", "model",
                                      "model_not_found"});
    }
    send_json(res, 200, model_json(config_.model_id, created_));
  });

  auto generation = [this](Endpoint endpoint) {
    return [this, endpoint](const httplib::Request& req, httplib::Response& res) {
      const Phase now = phase();
      if (now != Phase::ready) {
        return send_error(res, unavailable(now == Phase::loading ? "loading model" : "draining"));
      }
      auto parsed = parse_request(endpoint, req.body);
      if (!parsed) return send_error(res, parsed.error());
      if (parsed->model != config_.model_id) {
        return send_error(res, ApiError{404, "model '" + parsed->model + "' does not exist; this server serves '" +
                                                 config_.model_id + "'",
                                        "invalid_request_error", "model", "model_not_found"});
      }
      const Tokenizer& tokenizer = *model_.tokenizer;
      GenerationJob job;
      const ChatToolMarkup* tool_markup = nullptr;  // set: the answer is parsed for tool calls
      if (endpoint == Endpoint::chat) {
        if (!model_.chat_format) {
          return send_error(res, bad_param("messages", "this model has no chat template (chat.json in the container "
                                                       "or --chat-format): use /v1/completions"));
        }
        const ChatFormat& format = *model_.chat_format;
        if (auto supported = check_tools_supported(*parsed, format); !supported) {
          return send_error(res, supported.error());
        }
        auto constraint = make_constraint(*parsed, format, tokenizer, model_.token_index);
        if (!constraint) return send_error(res, constraint.error());
        job.constraint = std::move(*constraint);
        if (format.tools && !parsed->tools.empty() && parsed->tool_choice != ToolChoice::none) {
          tool_markup = &*format.tools;
        }
        if (parsed->images.empty()) {
          job.prompt = build_chat_prompt(tokenizer, format, parsed->messages, true, parsed->tools_json);
        } else if (auto media = build_media_prompt(*parsed, tokenizer, format, model_.vision, job); !media) {
          return send_error(res, media.error());
        }
        const ChatStop stop = chat_stop(tokenizer, *model_.chat_format);
        for (int id : stop.ids) {
          if (id >= 0) job.stop_ids.push_back(id);
        }
        if (!stop.text.empty()) job.stop_texts.push_back(stop.text);
      } else {
        job.prompt = parsed->prompt_is_ids ? parsed->prompt_ids : tokenizer.encode(parsed->prompt_text);
        if (tokenizer.eos() >= 0) job.stop_ids.push_back(tokenizer.eos());
      }
      job.stop_texts.insert(job.stop_texts.end(), parsed->stop.begin(), parsed->stop.end());
      job.sampling = parsed->sampling;
      job.max_tokens = parsed->max_tokens.value_or(model_.scheduler->ctx_tokens());
      job.top_logprobs = parsed->logprobs ? parsed->top_logprobs : -1;
      job.logit_bias = parsed->logit_bias;
      auto submitted = model_.scheduler->submit(std::move(job));
      if (!submitted) {
        ApiError error = submitted.error();
        if (endpoint == Endpoint::completion && error.param == "messages") error.param = "prompt";
        return send_error(res, error);
      }

      ResponseIds ids{response_id(endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-"), std::int64_t(std::time(nullptr)),
                      config_.model_id};
      std::shared_ptr<RequestStream> stream = *submitted;
      if (parsed->stream) {
        auto state = std::make_shared<StreamState>();
        state->stream = stream;
        state->ids = ids;
        state->endpoint = endpoint;
        state->include_usage = parsed->include_usage;
        state->want_logprobs = parsed->logprobs;
        if (tool_markup) state->tools.emplace(*tool_markup, response_id("call_") + "_");
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");  // nginx: pass each event through at once
        res.set_chunked_content_provider(
            "text/event-stream",
            [state](std::size_t, httplib::DataSink& sink) {
              std::vector<Delta> deltas;
              const bool finished = state->stream->take(deltas, kWaitSlice);
              if (deltas.empty() && !finished) {
                // Silence (queued, or a long prompt): a comment now and then finds a gone client.
                if (++state->silent_slices < kPingSlices) return true;
                state->silent_slices = 0;
                static constexpr char kPing[] = ": ping\n\n";
                return sink.write(kPing, sizeof kPing - 1);
              }
              state->silent_slices = 0;
              return write_stream(*state, sink, deltas, finished);
            },
            // Called once the response is over, sent or not: a client that left cancels its sequence.
            [stream](bool) { stream->cancel(); });
        return;
      }
      std::string text;
      std::vector<TokenLogprob> logprobs;
      // A blocking request has nothing to write until the end, so the socket itself is watched:
      // a client that leaves cancels its sequence within a wait slice.
      const std::optional<PeerWatch> peer = PeerWatch::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
      for (bool finished = false; !finished;) {
        if (peer && peer->gone()) {
          stream->cancel();
          res.status = 499;  // nobody reads it; nginx's "client closed request"
          return;
        }
        std::vector<Delta> deltas;
        finished = stream->take(deltas, kWaitSlice);
        for (Delta& d : deltas) {
          text += d.text;
          if (d.logprob) logprobs.push_back(std::move(*d.logprob));
        }
      }
      const Finish finish = stream->finish_reason();
      if (finish == Finish::error) return send_error(res, ApiError{500, stream->error(), "server_error", "", ""});
      if (finish == Finish::cancelled) return send_error(res, unavailable("the server stopped before the answer was complete"));
      const std::vector<TokenLogprob>* lp = parsed->logprobs ? &logprobs : nullptr;
      if (endpoint == Endpoint::completion) {
        return send_json(res, 200, text_completion_json(ids, text, finish, stream->prompt_tokens(),
                                                        stream->completion_tokens(), lp));
      }
      ParsedToolCalls calls;
      if (tool_markup) {
        calls = parse_tool_calls(*tool_markup, text, response_id("call_") + "_");
      } else {
        calls.content = std::move(text);
      }
      send_json(res, 200, chat_completion_json(ids, calls.content, finish, stream->prompt_tokens(),
                                               stream->completion_tokens(), lp, calls.calls));
    };
  };
  s.Post("/v1/chat/completions", generation(Endpoint::chat));
  s.Post("/v1/completions", generation(Endpoint::completion));
}

}  // namespace waste::serve

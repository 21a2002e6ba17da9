#include "cli/serve/generation_route.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <random>
#include <vector>

#include "cli/serve/api_reply.hpp"
#include "cli/serve/openai_response.hpp"
#include "cli/serve/structured_output.hpp"
#include "compute/prompt/reasoning_split.hpp"
#include "compute/prompt/tool_call_parser.hpp"

namespace waste::serve {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto kPingAfter = std::chrono::seconds(2);  // ": ping" after this much silence

ApiError unavailable(std::string message) {
  return ApiError{503, std::move(message), "service_unavailable_error", "", ""};
}

// Ids are unique within a process and unpredictable across processes.
std::string response_id(const char* prefix) {
  static std::atomic<std::uint64_t> counter{std::random_device{}()};
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(counter.fetch_add(1) * 0x9E3779B97F4A7C15ULL));
  return std::string(prefix) + hex;
}

// How the chat answer's text is read: its reasoning split off (a format with a think pair: the
// text up to the close marker, when the prompt opened the pair), then parsed for tool calls.
struct AnswerShape {
  const ChatToolMarkup* tools = nullptr;  // set: the answer is parsed for tool calls
  std::optional<ChatAffixes> think;       // set: reasoning_content is reported (empty if none)
  bool inside = false;                    // the prompt opened the pair: the reply starts in reasoning
};

// A streamed answer: SSE events appended as the engine thread pushes deltas.
class SseAnswer final : public http::StreamedBody {
 public:
  SseAnswer(std::shared_ptr<RequestStream> stream, ResponseIds ids, Endpoint endpoint, bool include_usage,
            bool want_logprobs, const AnswerShape& shape, std::shared_ptr<const void> hold)
      : stream_(std::move(stream)), ids_(std::move(ids)), endpoint_(endpoint), include_usage_(include_usage),
        want_logprobs_(want_logprobs), hold_(std::move(hold)), last_output_(Clock::now()) {
    if (shape.tools) tools_.emplace(*shape.tools, response_id("call_") + "_");
    if (shape.think) think_.emplace(*shape.think, shape.inside);
  }
  ~SseAnswer() override { stream_->cancel(); }  // over, sent or not: nothing more is read
  void set_waker(std::function<void()> wake) override { stream_->set_waker(std::move(wake)); }

  bool poll(std::string& out) override {
    std::vector<Delta> deltas;
    const bool finished = stream_->take(deltas, std::chrono::milliseconds(0));
    const std::size_t before = out.size();
    write(out, deltas, finished);
    if (out.size() > before) {
      last_output_ = Clock::now();
    } else if (!finished && Clock::now() - last_output_ >= kPingAfter) {
      // Silence (queued, or a long prompt): a comment now and then finds a gone client.
      out += ": ping\n\n";
      last_output_ = Clock::now();
    }
    return finished;
  }
  void client_gone() override { stream_->cancel(); }

 private:
  void write(std::string& out, const std::vector<Delta>& deltas, bool finished) {
    if (!started_) {
      started_ = true;
      if (endpoint_ == Endpoint::chat) {
        out += sse_event(chat_chunk_json(ids_, json{{"role", "assistant"}, {"content", ""}}, nullptr, include_usage_));
      }
    }
    // Reasoning becomes reasoning_content deltas, tool-call events tool-call deltas, the rest
    // content; a token's logprobs go with its first chunk.
    auto write_text = [&](const std::string& text, const std::vector<TokenLogprob>* lpp) {
      auto emit = [&](json delta) {
        out += sse_event(chat_chunk_json(ids_, std::move(delta), nullptr, include_usage_, lpp));
        lpp = nullptr;
      };
      std::string content = text;
      if (think_) {
        ReasoningPiece piece = think_->push(text);
        if (!piece.reasoning.empty()) emit(json{{"reasoning_content", std::move(piece.reasoning)}});
        content = std::move(piece.content);
      }
      if (tools_) {
        for (const ToolCallEvent& e : tools_->push(content)) emit(tool_event_delta_json(e));
      } else if (!content.empty()) {
        emit(json{{"content", content}});
      }
      if (lpp) emit(json{{"content", ""}});
    };
    for (const Delta& d : deltas) {
      if (d.text.empty() && !(want_logprobs_ && d.logprob)) continue;  // held back: nothing to send yet
      std::vector<TokenLogprob> lp;
      if (want_logprobs_ && d.logprob) lp.push_back(*d.logprob);
      const std::vector<TokenLogprob>* lpp = lp.empty() ? nullptr : &lp;
      if (endpoint_ == Endpoint::chat) {
        write_text(d.text, lpp);
        continue;
      }
      out += sse_event(completion_chunk_json(ids_, d.text, nullptr, include_usage_, lpp));
    }
    if (!finished) return;
    if (think_) {
      const ReasoningPiece tail = think_->finish();
      if (!tail.reasoning.empty()) {
        out += sse_event(chat_chunk_json(ids_, json{{"reasoning_content", tail.reasoning}}, nullptr, include_usage_));
      }
    }
    if (tools_) {
      for (const ToolCallEvent& e : tools_->finish()) {
        out += sse_event(chat_chunk_json(ids_, tool_event_delta_json(e), nullptr, include_usage_));
      }
    }
    const bool tool_calls = tools_ && tools_->calls() > 0;
    const Finish finish = stream_->finish_reason();
    if (finish == Finish::error || finish == Finish::cancelled) {
      // Mid-stream failure: the portable form is a data event with a top-level "error".
      const ApiError error = finish == Finish::error ? ApiError{500, stream_->error(), "server_error", "", ""}
                                                     : unavailable("the server stopped before the answer was complete");
      out += sse_event(error_json(error));
    } else {
      out += sse_event(endpoint_ == Endpoint::chat
                           ? chat_chunk_json(ids_, json::object(), finish_json(finish, tool_calls), include_usage_)
                           : completion_chunk_json(ids_, "", finish_json(finish), include_usage_));
      if (include_usage_) {
        out += sse_event(with_cached_tokens(
            usage_chunk_json(ids_, endpoint_, stream_->prompt_tokens(), stream_->completion_tokens()),
            stream_->cached_tokens()));
      }
    }
    out += kSseDone;
  }

  std::shared_ptr<RequestStream> stream_;
  ResponseIds ids_;
  Endpoint endpoint_;
  bool include_usage_;
  bool want_logprobs_;
  std::shared_ptr<const void> hold_;
  std::optional<ToolCallParser> tools_;
  std::optional<ReasoningSplit> think_;
  bool started_ = false;
  Clock::time_point last_output_;
};

// A blocking answer: the text is gathered as it comes; the JSON is built at the finish.
class BlockingAnswer final : public http::DeferredReply {
 public:
  BlockingAnswer(std::shared_ptr<RequestStream> stream, ResponseIds ids, Endpoint endpoint, bool want_logprobs,
                 AnswerShape shape, std::shared_ptr<const void> hold)
      : stream_(std::move(stream)), ids_(std::move(ids)), endpoint_(endpoint), want_logprobs_(want_logprobs),
        shape_(std::move(shape)), hold_(std::move(hold)) {}
  ~BlockingAnswer() override { stream_->cancel(); }
  void set_waker(std::function<void()> wake) override { stream_->set_waker(std::move(wake)); }

  std::optional<http::Reply> poll() override {
    std::vector<Delta> deltas;
    const bool finished = stream_->take(deltas, std::chrono::milliseconds(0));
    for (Delta& d : deltas) {
      text_ += d.text;
      if (d.logprob) logprobs_.push_back(std::move(*d.logprob));
    }
    if (!finished) return std::nullopt;
    const Finish finish = stream_->finish_reason();
    if (finish == Finish::error) return error_reply(ApiError{500, stream_->error(), "server_error", "", ""});
    if (finish == Finish::cancelled) return error_reply(unavailable("the server stopped before the answer was complete"));
    const std::vector<TokenLogprob>* lp = want_logprobs_ ? &logprobs_ : nullptr;
    if (endpoint_ == Endpoint::completion) {
      return json_reply(200, with_cached_tokens(text_completion_json(ids_, text_, finish, stream_->prompt_tokens(),
                                                                     stream_->completion_tokens(), lp),
                                                stream_->cached_tokens()));
    }
    std::optional<std::string> reasoning;
    if (shape_.think) {
      ReasoningPiece piece = split_reasoning(*shape_.think, text_, shape_.inside);
      reasoning = std::move(piece.reasoning);
      text_ = std::move(piece.content);
    }
    ParsedToolCalls calls;
    if (shape_.tools) {
      calls = parse_tool_calls(*shape_.tools, text_, response_id("call_") + "_");
    } else {
      calls.content = std::move(text_);
    }
    return json_reply(200, with_cached_tokens(chat_completion_json(ids_, calls.content, finish, stream_->prompt_tokens(),
                                                                   stream_->completion_tokens(), lp, calls.calls, reasoning),
                                              stream_->cached_tokens()));
  }
  void client_gone() override { stream_->cancel(); }

 private:
  std::shared_ptr<RequestStream> stream_;
  ResponseIds ids_;
  Endpoint endpoint_;
  bool want_logprobs_;
  AnswerShape shape_;
  std::shared_ptr<const void> hold_;  // shape_.tools points into it
  std::string text_;
  std::vector<TokenLogprob> logprobs_;
};

// The scheduler's job for a parsed request: the prompt (chat template, tools, images), the stop
// ids and texts, the constraint (compute/prompt) and the sampling; `shape` says how the answer's
// text is read (reasoning, tool calls).
// reasoning_effort: on a format with an "effort", a level it names (or a number in its range)
// goes into the prompt's effort turn, anything else is a 400; "none" on a format with a think
// pair opens the model's turn with the pair already closed (no reasoning). On a format without
// an "effort" a well-formed value is accepted and ignored (OpenAI lists it among the fields a
// server may ignore; the request parser already refused malformed ones).
std::expected<GenerationJob, ApiError> build_job(Endpoint endpoint, const ParsedRequest& parsed,
                                                 const ServeModel& model, AnswerShape& shape) {
  const Tokenizer& tokenizer = *model.tokenizer;
  GenerationJob job;
  shape = AnswerShape{};
  if (endpoint == Endpoint::chat) {
    if (!model.chat_format) {
      return std::unexpected(bad_param("messages", "this model has no chat template (chat.json in the container "
                                                   "or --chat-format): use /v1/completions"));
    }
    const ChatFormat& format = *model.chat_format;
    if (auto supported = check_tools_supported(parsed, format); !supported) return std::unexpected(supported.error());
    auto constraint = make_constraint(parsed, format, tokenizer, model.token_index);
    if (!constraint) return std::unexpected(constraint.error());
    job.constraint = std::move(*constraint);
    if (format.tools && !parsed.tools.empty() && parsed.tool_choice != ToolChoice::none) {
      shape.tools = &*format.tools;
    }
    ChatRender render;
    render.tools_json = parsed.tools_json;
    std::string effort;
    const bool no_reasoning = parsed.reasoning_effort == "none" && format.think;
    if (format.effort && !parsed.reasoning_effort.empty() && !no_reasoning) {
      auto level = resolve_effort(format, parsed.reasoning_effort, parsed.reasoning_effort_numeric);
      if (!level) return std::unexpected(bad_param("reasoning_effort", "'reasoning_effort' " + level.error().message));
      effort = std::move(*level);
      render.effort = effort;
    }
    // An answer constrained from its first token has no room for reasoning: the pair is closed.
    render.thinking = !job.constraint && !no_reasoning;
    if (format.think) {
      shape.think = format.think;
      shape.inside = render.thinking;
    }
    if (parsed.images.empty()) {
      job.prompt = build_chat_prompt(tokenizer, format, parsed.messages, render);
    } else if (auto media = build_media_prompt(parsed, tokenizer, format, model.vision, job, request_limits(),
                                               decoding_pixels(), &render);
               !media) {
      return std::unexpected(media.error());
    }
    const ChatStop stop = chat_stop(tokenizer, format);
    for (int id : stop.ids) {
      if (id >= 0) job.stop_ids.push_back(id);
    }
    if (!stop.text.empty()) job.stop_texts.push_back(stop.text);
  } else {
    job.prompt = parsed.prompt_is_ids ? parsed.prompt_ids : tokenizer.encode(parsed.prompt_text);
    for (int id : tokenizer.eos_ids()) {
      if (id >= 0) job.stop_ids.push_back(id);
    }
  }
  job.stop_texts.insert(job.stop_texts.end(), parsed.stop.begin(), parsed.stop.end());
  job.sampling = parsed.sampling;
  job.max_tokens = parsed.max_tokens.value_or(model.scheduler->ctx_tokens());
  job.top_logprobs = parsed.logprobs ? parsed.top_logprobs : -1;
  job.logit_bias = parsed.logit_bias;
  return job;
}

}  // namespace

http::Reply generation_reply(Endpoint endpoint, std::string_view body, const ServeModel& model,
                             const std::string& model_id, Admission ticket) {
  auto parsed = parse_request(endpoint, body);
  if (!parsed) return error_reply(parsed.error());
  if (parsed->model != model_id) {
    return error_reply(ApiError{404, "model '" + parsed->model + "' does not exist; this server serves '" + model_id + "'",
                                "invalid_request_error", "model", "model_not_found"});
  }
  return parsed_generation_reply(endpoint, *parsed, model, model_id, std::move(ticket));
}

http::Reply parsed_generation_reply(Endpoint endpoint, const ParsedRequest& parsed, const ServeModel& model,
                                    const std::string& model_id, Admission ticket) {
  AnswerShape shape;
  auto job = build_job(endpoint, parsed, model, shape);
  if (!job) return error_reply(job.error());
  auto submitted = model.scheduler->submit(std::move(*job), std::move(ticket));
  if (!submitted) {
    ApiError error = submitted.error();
    if (endpoint == Endpoint::completion && error.param == "messages") error.param = "prompt";
    return error_reply(error);
  }
  ResponseIds ids{response_id(endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-"), std::int64_t(std::time(nullptr)),
                  model_id};
  http::Reply reply;
  if (parsed.stream) {
    reply.content_type = "text/event-stream";
    reply.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};  // nginx: each event at once
    reply.stream = std::make_shared<SseAnswer>(*submitted, std::move(ids), endpoint, parsed.include_usage,
                                               parsed.logprobs, shape, model.hold);
  } else {
    reply.deferred =
        std::make_shared<BlockingAnswer>(*submitted, std::move(ids), endpoint, parsed.logprobs, shape, model.hold);
  }
  return reply;
}

}  // namespace waste::serve

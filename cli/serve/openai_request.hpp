// OpenAI request bodies (POST /v1/chat/completions, /v1/completions) parsed and validated into a
// typed request. Every failure is an ApiError (400) that names the parameter; nothing here
// touches the engine or a file, so a body can only ever choose among the values it validates.
// (ToolDef, ToolChoice, ResponseFormat: compute/prompt/tool_spec.hpp.) Unsupported features are refused, never ignored: n != 1, non-function tools, audio and file
// parts, image parts outside user messages and not data: URLs, echo/suffix/best_of. Schemas are only checked for shape here; structured_output.*
// compiles them (and refuses unsupported keywords).
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/serve/api_error.hpp"
#include "cli/serve/request_limits.hpp"
#include "compute/prompt/tool_spec.hpp"
#include "compute/sampling/sampler.hpp"
#include "compute/prompt/chat_format.hpp"

namespace waste::serve {

enum class Endpoint : std::uint8_t { chat, completion };

// An image_url part of a user message: its data: URL's bytes (PNG or JPEG as far as the URL says;
// the decoder sniffs and decides) and where its media block goes.
struct ImagePart {
  std::size_t message = 0;          // index in messages
  std::size_t offset = 0;           // byte offset in that message's content (between its text parts)
  std::string param;                // "messages[0].content[1].image_url.url", for errors
  std::vector<std::uint8_t> bytes;
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::chat;
  std::string model;
  std::vector<ChatMessage> messages;  // chat: in order (developer = system); content = the text parts joined
  std::vector<ImagePart> images;      // chat: the image_url parts, in message and part order
  bool prompt_is_ids = false;         // completion: the prompt was token ids
  std::string prompt_text;            // completion, text prompt
  std::vector<int> prompt_ids;        // completion, id prompt
  SamplingParams sampling;            // OpenAI defaults: temperature 1, top_p 1
  std::optional<int> max_tokens;      // none => until the context is full (chat) / 16 (completion)
  std::vector<std::string> stop;      // at most 4, each non-empty
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;               // 0..20 (chat), 0..5 (completion's integer logprobs)
  // logit_bias: {token id: -100..100} added to the logits before sampling, in id order (the
  // scheduler checks the ids against the vocabulary).
  std::vector<std::pair<int, float>> logit_bias;

  // Chat only.
  std::vector<ToolDef> tools;
  std::string tools_json;             // the declared tools array, compact JSON (keys sorted), for the prompt
  ToolChoice tool_choice = ToolChoice::none;  // the spec's default: none without tools, auto with
  std::string tool_choice_name;       // named: one of tools
  ResponseFormat response_format = ResponseFormat::text;
  nlohmann::json response_schema;     // json_schema: the schema (null = any JSON object)
  // reasoning_effort as sent: one of OpenAI's names (or "max"), or a whole number's decimal text
  // (numeric set); "" = not sent. Resolved against the chat format's "effort" by build_job.
  std::string reasoning_effort;
  bool reasoning_effort_numeric = false;
  [[nodiscard]] bool has_tool_history() const;  // an assistant message with tool_calls
};

// `body` is the raw request body. Invalid JSON (or invalid UTF-8 in it), a non-object, a wrong
// type or a value out of range gives a 400 naming the parameter, e.g. "messages[2].role". A body
// nested deeper than max_json_depth is refused while it is parsed (json_body.hpp).
std::expected<ParsedRequest, ApiError> parse_request(Endpoint endpoint, std::string_view body,
                                                     int max_json_depth = request_limits().max_json_depth);

// Limits the parser enforces (the OpenAI spec's, plus a sanity bound on max_tokens).
inline constexpr int kMaxStops = 4;
inline constexpr int kMaxTopLogprobs = 20;
inline constexpr int kMaxCompletionLogprobs = 5;
inline constexpr std::size_t kMaxLogitBias = 1024;  // entries in one logit_bias
inline constexpr int kMaxTools = 128;
inline constexpr std::size_t kMaxImages = 16;  // image_url parts in one request (each runs the tower)

}  // namespace waste::serve

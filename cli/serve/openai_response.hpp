// OpenAI response bodies and SSE framing (openai-api.md §2-§6): blocking chat.completion and
// text_completion objects, their streaming chunks, usage, the model list and error objects.
// Every dump replaces invalid UTF-8 (a token may end inside a character) instead of throwing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/serve/api_error.hpp"
#include "cli/serve/openai_request.hpp"
#include "cli/serve/request_stream.hpp"
#include "compute/prompt/tool_call_parser.hpp"

namespace waste::serve {

// One response's identity, the same in every chunk of a stream.
struct ResponseIds {
  std::string id;         // "chatcmpl-…" / "cmpl-…"
  std::int64_t created = 0;
  std::string model;
};

std::string dump(const nlohmann::json& doc);
// {"error": {"message", "type", "param", "code"}} (param/code null when empty).
nlohmann::json error_json(const ApiError& error);
// "data: <one-line JSON>\n\n" and the terminator "data: [DONE]\n\n".
std::string sse_event(const nlohmann::json& doc);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

nlohmann::json usage_json(int prompt_tokens, int completion_tokens);
// `reply` with usage.prompt_tokens_details.cached_tokens: the prompt tokens the prefix cache
// restored instead of feeding (included in prompt_tokens, as OpenAI counts them).
nlohmann::json with_cached_tokens(nlohmann::json reply, int cached_tokens);
// "stop" or "length" ("tool_calls" instead of "stop" when the answer holds calls); a cancelled
// or failed request has no OpenAI finish reason (null).
nlohmann::json finish_json(Finish finish, bool tool_calls = false);

// Logprobs of the whole answer: chat's {content: [...], refusal: null}, completion's
// {tokens, token_logprobs, top_logprobs, text_offset} (offsets count bytes from `offset0`).
nlohmann::json chat_logprobs_json(const std::vector<TokenLogprob>& tokens);
nlohmann::json completion_logprobs_json(const std::vector<TokenLogprob>& tokens, std::size_t offset0 = 0);

// Blocking answers. With tool calls: message.tool_calls [{id, type: "function", function: {name,
// arguments}}], content null when there is no text, finish_reason "tool_calls". With `reasoning`
// (a format with a think pair): message.reasoning_content, the reply's reasoning ("" if none).
nlohmann::json chat_completion_json(const ResponseIds& ids, const std::string& text, Finish finish,
                                    int prompt_tokens, int completion_tokens,
                                    const std::vector<TokenLogprob>* logprobs,
                                    const std::vector<ChatToolCall>& tool_calls = {},
                                    const std::optional<std::string>& reasoning = std::nullopt);
nlohmann::json text_completion_json(const ResponseIds& ids, const std::string& text, Finish finish,
                                    int prompt_tokens, int completion_tokens,
                                    const std::vector<TokenLogprob>* logprobs);

// Stream chunks. `delta` is the chat delta object ({"role":"assistant","content":""}, {"content":…},
// {"reasoning_content":…}, {}).
// With include_usage every chunk carries "usage": null, and usage_chunk() comes last (choices: []).
nlohmann::json chat_chunk_json(const ResponseIds& ids, nlohmann::json delta, const nlohmann::json& finish,
                               bool include_usage, const std::vector<TokenLogprob>* logprobs = nullptr);
nlohmann::json completion_chunk_json(const ResponseIds& ids, const std::string& text, const nlohmann::json& finish,
                                     bool include_usage, const std::vector<TokenLogprob>* logprobs = nullptr);
// The chat delta for one parser event: {"content": …}, or OpenAI's tool-call fragments: first
// {"tool_calls": [{index, id, type: "function", function: {name, arguments: ""}}]}, then
// {"tool_calls": [{index, function: {arguments: "<raw slice>"}}]}.
nlohmann::json tool_event_delta_json(const ToolCallEvent& event);
nlohmann::json usage_chunk_json(const ResponseIds& ids, Endpoint endpoint, int prompt_tokens, int completion_tokens);

// GET /v1/models and /v1/models/{id}.
nlohmann::json model_json(const std::string& id, std::int64_t created);
nlohmann::json models_json(const std::string& id, std::int64_t created);
// One model of a server that loads its models on demand: model_json plus "status" ("loaded",
// "unloaded", "loading", "unloading"), a field OpenAI's Model does not have (clients ignore it).
nlohmann::json model_json(const std::string& id, std::int64_t created, const std::string& status);

}  // namespace waste::serve

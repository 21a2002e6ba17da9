#include "cli/serve/openai_response.hpp"

namespace waste::serve {

using nlohmann::json;

std::string dump(const json& doc) { return doc.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_json(const ApiError& error) {
  json inner;
  inner["message"] = error.message;
  inner["type"] = error.type;
  inner["param"] = error.param.empty() ? json(nullptr) : json(error.param);
  inner["code"] = error.code.empty() ? json(nullptr) : json(error.code);
  return json{{"error", inner}};
}

std::string sse_event(const json& doc) { return "data: " + dump(doc) + "\n\n"; }

json usage_json(int prompt_tokens, int completion_tokens) {
  return json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}

json with_cached_tokens(json reply, int cached_tokens) {
  if (auto usage = reply.find("usage"); usage != reply.end() && usage->is_object()) {
    (*usage)["prompt_tokens_details"] = json{{"cached_tokens", cached_tokens}};
  }
  return reply;
}

json finish_json(Finish finish, bool tool_calls) {
  switch (finish) {
    case Finish::stop: return tool_calls ? "tool_calls" : "stop";
    case Finish::length: return "length";
    default: return nullptr;
  }
}

namespace {

json bytes_of(const std::string& text) {
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(int(c));
  return bytes;
}

json base(const ResponseIds& ids, const char* object) {
  return json{{"id", ids.id}, {"object", object}, {"created", ids.created}, {"model", ids.model},
              {"system_fingerprint", "waste"}};
}

}  // namespace

json chat_logprobs_json(const std::vector<TokenLogprob>& tokens) {
  json content = json::array();
  for (const TokenLogprob& t : tokens) {
    json top = json::array();
    for (std::size_t i = 0; i < t.top.size(); ++i) {
      const std::string& text = i < t.top_text.size() ? t.top_text[i] : std::string();
      top.push_back(json{{"token", text}, {"logprob", t.top[i].logprob}, {"bytes", bytes_of(text)}});
    }
    content.push_back(json{{"token", t.text}, {"logprob", t.logprob}, {"bytes", bytes_of(t.text)}, {"top_logprobs", top}});
  }
  return json{{"content", content}, {"refusal", nullptr}};
}

json completion_logprobs_json(const std::vector<TokenLogprob>& tokens, std::size_t offset0) {
  json out{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
           {"text_offset", json::array()}};
  std::size_t offset = offset0;
  for (const TokenLogprob& t : tokens) {
    out["tokens"].push_back(t.text);
    out["token_logprobs"].push_back(t.logprob);
    json top = json::object();
    for (std::size_t i = 0; i < t.top.size(); ++i) {
      top[i < t.top_text.size() ? t.top_text[i] : std::string()] = t.top[i].logprob;
    }
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(offset);
    offset += t.text.size();
  }
  return out;
}

json chat_completion_json(const ResponseIds& ids, const std::string& text, Finish finish, int prompt_tokens,
                          int completion_tokens, const std::vector<TokenLogprob>* logprobs,
                          const std::vector<ChatToolCall>& tool_calls, const std::optional<std::string>& reasoning) {
  json doc = base(ids, "chat.completion");
  json message{{"role", "assistant"}, {"content", text}, {"refusal", nullptr}};
  if (reasoning) message["reasoning_content"] = *reasoning;
  if (!tool_calls.empty()) {
    if (text.empty()) message["content"] = nullptr;
    json calls = json::array();
    for (const ChatToolCall& call : tool_calls) {
      calls.push_back(json{{"id", call.id},
                           {"type", "function"},
                           {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    }
    message["tool_calls"] = std::move(calls);
  }
  doc["choices"] = json::array({json{{"index", 0},
                                     {"message", message},
                                     {"logprobs", logprobs ? chat_logprobs_json(*logprobs) : json(nullptr)},
                                     {"finish_reason", finish_json(finish, !tool_calls.empty())}}});
  doc["usage"] = usage_json(prompt_tokens, completion_tokens);
  return doc;
}

json text_completion_json(const ResponseIds& ids, const std::string& text, Finish finish, int prompt_tokens,
                          int completion_tokens, const std::vector<TokenLogprob>* logprobs) {
  json doc = base(ids, "text_completion");
  doc["choices"] = json::array({json{{"index", 0},
                                     {"text", text},
                                     {"logprobs", logprobs ? completion_logprobs_json(*logprobs) : json(nullptr)},
                                     {"finish_reason", finish_json(finish)}}});
  doc["usage"] = usage_json(prompt_tokens, completion_tokens);
  return doc;
}

json chat_chunk_json(const ResponseIds& ids, json delta, const json& finish, bool include_usage,
                     const std::vector<TokenLogprob>* logprobs) {
  json doc = base(ids, "chat.completion.chunk");
  doc["choices"] = json::array({json{{"index", 0},
                                     {"delta", std::move(delta)},
                                     {"logprobs", logprobs ? chat_logprobs_json(*logprobs) : json(nullptr)},
                                     {"finish_reason", finish}}});
  if (include_usage) doc["usage"] = nullptr;
  return doc;
}

json completion_chunk_json(const ResponseIds& ids, const std::string& text, const json& finish, bool include_usage,
                           const std::vector<TokenLogprob>* logprobs) {
  json doc = base(ids, "text_completion");
  doc["choices"] = json::array({json{{"index", 0},
                                     {"text", text},
                                     {"logprobs", logprobs ? completion_logprobs_json(*logprobs) : json(nullptr)},
                                     {"finish_reason", finish}}});
  if (include_usage) doc["usage"] = nullptr;
  return doc;
}

json tool_event_delta_json(const ToolCallEvent& event) {
  switch (event.kind) {
    case ToolCallEvent::Kind::content: return json{{"content", event.text}};
    case ToolCallEvent::Kind::call_start:
      return json{{"tool_calls", json::array({json{{"index", event.index},
                                                   {"id", event.id},
                                                   {"type", "function"},
                                                   {"function", {{"name", event.name}, {"arguments", ""}}}}})}};
    case ToolCallEvent::Kind::arguments:
      return json{{"tool_calls", json::array({json{{"index", event.index}, {"function", {{"arguments", event.text}}}}})}};
  }
  return json::object();
}

json usage_chunk_json(const ResponseIds& ids, Endpoint endpoint, int prompt_tokens, int completion_tokens) {
  json doc = base(ids, endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion");
  doc["choices"] = json::array();
  doc["usage"] = usage_json(prompt_tokens, completion_tokens);
  return doc;
}

json model_json(const std::string& id, std::int64_t created) {
  return json{{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "waste"}};
}

json model_json(const std::string& id, std::int64_t created, const std::string& status) {
  json doc = model_json(id, created);
  doc["status"] = status;
  return doc;
}

json models_json(const std::string& id, std::int64_t created) {
  return json{{"object", "list"}, {"data", json::array({model_json(id, created)})}};
}

}  // namespace waste::serve

#include "cli/serve/openai_request.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "cli/serve/data_url.hpp"
#include "cli/serve/json_body.hpp"
#include "compute/vision/image_decode.hpp"

namespace waste::serve {
namespace {

using nlohmann::json;
using Parsed = std::expected<ParsedRequest, ApiError>;

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;  // null = absent (openai-api.md §1)
  return &*it;
}

std::unexpected<ApiError> fail(std::string param, std::string message) {
  return std::unexpected(bad_param(std::move(param), std::move(message)));
}

std::expected<bool, ApiError> get_bool(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) return fail(name, std::string("'") + name + "' must be a boolean");
  return v->get<bool>();
}

std::expected<double, ApiError> get_number(const json& body, const char* name, double fallback, double lo, double hi) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) return fail(name, std::string("'") + name + "' must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    return fail(name, std::string("'") + name + "' must be between " + json(lo).dump() + " and " + json(hi).dump());
  }
  return x;
}

// An integer in [lo, hi]; 2.0 is not an integer here (the spec's types are integers).
std::expected<std::optional<std::int64_t>, ApiError> get_int(const json& body, const char* name, std::int64_t lo,
                                                             std::int64_t hi) {
  const json* v = field(body, name);
  if (!v) return std::optional<std::int64_t>();
  if (!v->is_number_integer()) return fail(name, std::string("'") + name + "' must be an integer");
  if (v->is_number_unsigned() && v->get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max())) {
    return fail(name, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  const std::int64_t x = v->get<std::int64_t>();
  if (x < lo || x > hi) {
    return fail(name, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  return std::optional<std::int64_t>(x);
}

// Content: a string or an array of parts: {type: "text", text} (joined without separator) and,
// where `images` is given (user messages), {type: "image_url", image_url: {url, detail?}} or
// image_url: "url", each placed at the content's length so far.
std::expected<std::string, ApiError> content_text(const json& content, const std::string& param, std::size_t message,
                                                  std::vector<ImagePart>* images) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return fail(param, "'" + param + "' must be a string or an array of content parts");
  std::string text;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return fail(p, "'" + p + "' must be an object");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) return fail(p + ".type", "'" + p + ".type' must be a string");
    if (*type == "image_url") {
      if (!images) {
        return fail(p + ".type", "'" + p + ".type' \"image_url\" is only accepted in user messages");
      }
      if (images->size() >= kMaxImages) {
        return fail(p, "'" + p + "': at most " + std::to_string(kMaxImages) + " image_url parts per request");
      }
      const json* image = field(part, "image_url");
      const json* url = image && image->is_object() ? field(*image, "url") : image;
      const std::string url_param = p + ".image_url" + (image && image->is_object() ? ".url" : "");
      if (!image) return fail(p + ".image_url", "'" + p + ".image_url' is required");
      if (!url || !url->is_string()) {
        return fail(url_param, "'" + url_param + "' must be a string (a data: URL)");
      }
      if (image->is_object()) {
        if (const json* detail = field(*image, "detail"); detail && !detail->is_string()) {
          return fail(p + ".image_url.detail", "'" + p + ".image_url.detail' must be a string");
        }
      }
      auto bytes = decode_data_url(url->get_ref<const std::string&>(), url_param, vision::DecodeLimits{}.max_bytes);
      if (!bytes) return std::unexpected(bytes.error());
      images->push_back({message, text.size(), url_param, std::move(*bytes)});
      continue;
    }
    if (*type != "text") {
      return fail(p + ".type", "'" + p + ".type' " + type->dump() + " is not supported (text and image_url parts only)");
    }
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) return fail(p + ".text", "'" + p + ".text' must be a string");
    text += t->get<std::string>();
  }
  return text;
}

// OpenAI's rule for function and schema names.
bool valid_name(const json& v) { return v.is_string() && valid_tool_name(v.get_ref<const std::string&>()); }

const char* kNameRule = " must be a string of 1 to 64 characters from a-z, A-Z, 0-9, _ and -";

std::expected<std::vector<ChatToolCall>, ApiError> parse_tool_calls(const json& calls, const std::string& param) {
  if (!calls.is_array()) return fail(param, "'" + param + "' must be an array");
  std::vector<ChatToolCall> out;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const json& c = calls[i];
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!c.is_object()) return fail(p, "'" + p + "' must be an object");
    const json* id = field(c, "id");
    if (!id || !id->is_string()) return fail(p + ".id", "'" + p + ".id' must be a string");
    if (const json* type = field(c, "type"); type && *type != "function") {
      return fail(p + ".type", "'" + p + ".type' must be \"function\"");
    }
    const json* function = field(c, "function");
    if (!function || !function->is_object()) return fail(p + ".function", "'" + p + ".function' must be an object");
    const json* name = field(*function, "name");
    if (!name || !valid_name(*name)) return fail(p + ".function.name", "'" + p + ".function.name'" + kNameRule);
    const json* arguments = field(*function, "arguments");
    if (!arguments || !arguments->is_string()) {
      return fail(p + ".function.arguments", "'" + p + ".function.arguments' must be a string (JSON text)");
    }
    out.push_back({id->get<std::string>(), name->get<std::string>(), arguments->get<std::string>()});
  }
  return out;
}

std::expected<std::vector<ChatMessage>, ApiError> parse_messages(const json& body, std::vector<ImagePart>& images) {
  const json* messages = field(body, "messages");
  if (!messages) return fail("messages", "'messages' is required");
  if (!messages->is_array()) return fail("messages", "'messages' must be an array");
  if (messages->empty()) return fail("messages", "'messages' must hold at least one message");
  std::vector<ChatMessage> out;
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return fail(p, "'" + p + "' must be an object");
    auto role_it = m.find("role");
    if (role_it == m.end() || !role_it->is_string()) return fail(p + ".role", "'" + p + ".role' must be a string");
    const std::string role = role_it->get<std::string>();
    ChatMessage message;
    if (role == "system" || role == "developer") {
      message.role = ChatRole::system;
    } else if (role == "user") {
      message.role = ChatRole::user;
    } else if (role == "assistant") {
      message.role = ChatRole::assistant;
      if (const json* calls = field(m, "tool_calls"); calls) {
        auto parsed = parse_tool_calls(*calls, p + ".tool_calls");
        if (!parsed) return std::unexpected(parsed.error());
        message.tool_calls = std::move(*parsed);
      }
      // The reasoning of an earlier answer (the DeepSeek convention the responses use); the
      // chat format decides whether the prompt shows it.
      if (const json* reasoning = field(m, "reasoning_content"); reasoning && !reasoning->is_null()) {
        if (!reasoning->is_string()) {
          return fail(p + ".reasoning_content", "'" + p + ".reasoning_content' must be a string");
        }
        message.reasoning = reasoning->get<std::string>();
      }
    } else if (role == "tool") {
      message.role = ChatRole::tool;
      const json* id = field(m, "tool_call_id");
      if (!id || !id->is_string()) return fail(p + ".tool_call_id", "'" + p + ".tool_call_id' must be a string");
      message.tool_call_id = id->get<std::string>();
      if (const json* name = field(m, "name"); name) {
        if (!name->is_string()) return fail(p + ".name", "'" + p + ".name' must be a string");
        message.name = name->get<std::string>();
      }
    } else {
      return fail(p + ".role", "'" + p + ".role' " + role_it->dump() +
                                   " is not one of system, developer, user, assistant, tool");
    }
    const json* content = field(m, "content");
    if (!content) {
      if (message.role != ChatRole::assistant) return fail(p + ".content", "'" + p + ".content' is required");
    } else {
      auto text = content_text(*content, p + ".content", i, message.role == ChatRole::user ? &images : nullptr);
      if (!text) return std::unexpected(text.error());
      message.content = std::move(*text);
    }
    out.push_back(std::move(message));
  }
  return out;
}

std::expected<std::vector<std::string>, ApiError> parse_stop(const json& body) {
  const json* stop = field(body, "stop");
  std::vector<std::string> out;
  if (!stop) return out;
  if (stop->is_string()) {
    out.push_back(stop->get<std::string>());
  } else if (stop->is_array()) {
    if (stop->size() > std::size_t(kMaxStops)) {
      return fail("stop", "'stop' holds at most " + std::to_string(kMaxStops) + " sequences");
    }
    for (const json& s : *stop) {
      if (!s.is_string()) return fail("stop", "'stop' must be a string or an array of strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    return fail("stop", "'stop' must be a string or an array of strings");
  }
  for (const auto& s : out) {
    if (s.empty()) return fail("stop", "'stop' sequences must not be empty");
  }
  return out;
}

// The fields both endpoints share: sampling, length, stop, stream.
std::expected<void, ApiError> parse_common(const json& body, ParsedRequest& r) {
  const json* model = field(body, "model");
  if (!model) return fail("model", "'model' is required");
  if (!model->is_string()) return fail("model", "'model' must be a string");
  r.model = model->get<std::string>();

  if (auto n = get_int(body, "n", 1, 128); !n) {
    return std::unexpected(n.error());
  } else if (n->value_or(1) != 1) {
    return fail("n", "'n' must be 1 (one choice per request)");
  }
  auto temperature = get_number(body, "temperature", 1.0, 0.0, 2.0);
  if (!temperature) return std::unexpected(temperature.error());
  auto top_p = get_number(body, "top_p", 1.0, 0.0, 1.0);
  if (!top_p) return std::unexpected(top_p.error());
  auto top_k = get_int(body, "top_k", 0, std::numeric_limits<int>::max());
  if (!top_k) return std::unexpected(top_k.error());
  auto seed = get_int(body, "seed", std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
  if (!seed) return std::unexpected(seed.error());
  auto presence = get_number(body, "presence_penalty", 0.0, -2.0, 2.0);
  if (!presence) return std::unexpected(presence.error());
  auto frequency = get_number(body, "frequency_penalty", 0.0, -2.0, 2.0);
  if (!frequency) return std::unexpected(frequency.error());
  r.sampling.temperature = float(*temperature);
  r.sampling.top_p = float(*top_p);
  r.sampling.top_k = int(top_k->value_or(0));
  r.sampling.seed = std::uint64_t(seed->value_or(0));
  r.sampling.presence_penalty = float(*presence);
  r.sampling.frequency_penalty = float(*frequency);

  // max_completion_tokens wins over the deprecated max_tokens (openai-api.md pitfall 11).
  auto max_tokens = get_int(body, "max_tokens", 0, std::numeric_limits<int>::max());
  if (!max_tokens) return std::unexpected(max_tokens.error());
  auto max_completion = get_int(body, "max_completion_tokens", 0, std::numeric_limits<int>::max());
  if (!max_completion) return std::unexpected(max_completion.error());
  if (*max_completion) {
    r.max_tokens = int(**max_completion);
  } else if (*max_tokens) {
    r.max_tokens = int(**max_tokens);
  }

  auto stop = parse_stop(body);
  if (!stop) return std::unexpected(stop.error());
  r.stop = std::move(*stop);

  auto stream = get_bool(body, "stream", false);
  if (!stream) return std::unexpected(stream.error());
  r.stream = *stream;
  if (const json* options = field(body, "stream_options"); options) {
    if (!options->is_object()) return fail("stream_options", "'stream_options' must be an object");
    if (!r.stream) return fail("stream_options", "'stream_options' is only allowed with 'stream': true");
    auto usage = get_bool(*options, "include_usage", false);
    if (!usage) return fail("stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
    r.include_usage = *usage;
  }
  if (const json* bias = field(body, "logit_bias"); bias) {
    if (!bias->is_object()) return fail("logit_bias", "'logit_bias' must be an object of token id: bias");
    if (bias->size() > kMaxLogitBias) {
      return fail("logit_bias", "'logit_bias' has " + std::to_string(bias->size()) + " entries; at most " +
                                    std::to_string(kMaxLogitBias) + " are allowed");
    }
    for (const auto& [key, value] : bias->items()) {
      int id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (key.empty() || ec != std::errc() || end != key.data() + key.size() || id < 0) {
        return fail("logit_bias", "'logit_bias' keys must be token ids; got '" + key + "'");
      }
      if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < -100.0 ||
          value.get<double>() > 100.0) {
        return fail("logit_bias", "'logit_bias' values must be numbers between -100 and 100 (token " + key + ")");
      }
      r.logit_bias.emplace_back(id, float(value.get<double>()));
    }
    std::sort(r.logit_bias.begin(), r.logit_bias.end());
  }
  return {};
}

std::expected<void, ApiError> parse_tools(const json& body, ParsedRequest& r) {
  const json* tools = field(body, "tools");
  if (tools) {
    if (!tools->is_array()) return fail("tools", "'tools' must be an array of function tools");
    if (tools->size() > std::size_t(kMaxTools)) {
      return fail("tools", "'tools' holds at most " + std::to_string(kMaxTools) + " tools");
    }
    for (std::size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string p = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) return fail(p, "'" + p + "' must be an object");
      const json* type = field(t, "type");
      if (!type || *type != "function") return fail(p + ".type", "'" + p + ".type' must be \"function\"");
      const json* function = field(t, "function");
      if (!function || !function->is_object()) return fail(p + ".function", "'" + p + ".function' must be an object");
      const json* name = field(*function, "name");
      if (!name || !valid_name(*name)) return fail(p + ".function.name", "'" + p + ".function.name'" + kNameRule);
      ToolDef tool;
      tool.name = name->get<std::string>();
      tool.parameters = json{{"type", "object"}, {"properties", json::object()}};
      for (const ToolDef& seen : r.tools) {
        if (seen.name == tool.name) {
          return fail(p + ".function.name", "'" + p + ".function.name' \"" + tool.name + "\" is declared twice");
        }
      }
      if (const json* description = field(*function, "description"); description) {
        if (!description->is_string()) {
          return fail(p + ".function.description", "'" + p + ".function.description' must be a string");
        }
        tool.description = description->get<std::string>();
      }
      if (const json* parameters = field(*function, "parameters"); parameters) {
        if (!parameters->is_object()) {
          return fail(p + ".function.parameters", "'" + p + ".function.parameters' must be a JSON Schema object");
        }
        tool.parameters = *parameters;
      }
      if (const json* strict = field(*function, "strict"); strict && !strict->is_boolean()) {
        return fail(p + ".function.strict", "'" + p + ".function.strict' must be a boolean");
      }
      r.tools.push_back(std::move(tool));
    }
    if (!r.tools.empty()) r.tools_json = declare_tools(r.tools);
  }
  r.tool_choice = r.tools.empty() ? ToolChoice::none : ToolChoice::automatic;
  const json* choice = field(body, "tool_choice");
  if (!choice) return {};
  const std::string rule =
      "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}";
  if (choice->is_string()) {
    if (*choice == "none") {
      r.tool_choice = ToolChoice::none;
    } else if (*choice == "auto") {
      r.tool_choice = ToolChoice::automatic;
    } else if (*choice == "required") {
      r.tool_choice = ToolChoice::required;
    } else {
      return fail("tool_choice", rule);
    }
  } else if (choice->is_object()) {
    const json* type = field(*choice, "type");
    const json* function = field(*choice, "function");
    const json* name = function && function->is_object() ? field(*function, "name") : nullptr;
    if (!type || *type != "function" || !name || !name->is_string()) return fail("tool_choice", rule);
    r.tool_choice = ToolChoice::named;
    r.tool_choice_name = name->get<std::string>();
    const bool known = std::any_of(r.tools.begin(), r.tools.end(), [&](const ToolDef& t) { return t.name == r.tool_choice_name; });
    if (!known) {
      return fail("tool_choice.function.name", "'tool_choice.function.name' \"" + name->get<std::string>() +
                                                   "\" is not one of the declared tools");
    }
  } else {
    return fail("tool_choice", rule);
  }
  if (r.tool_choice == ToolChoice::required && r.tools.empty()) {
    return fail("tool_choice", "'tool_choice' \"required\" needs a non-empty 'tools'");
  }
  if (r.tools.empty()) r.tool_choice = ToolChoice::none;  // "auto" with nothing to call
  return {};
}

std::expected<void, ApiError> parse_response_format(const json& body, ParsedRequest& r) {
  const json* format = field(body, "response_format");
  if (!format) return {};
  if (!format->is_object()) return fail("response_format", "'response_format' must be an object");
  const json* type = field(*format, "type");
  if (!type || !type->is_string() || (*type != "text" && *type != "json_object" && *type != "json_schema")) {
    return fail("response_format.type",
                "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
  }
  if (*type == "text") return {};
  if (*type == "json_object") {
    r.response_format = ResponseFormat::json_object;
  } else {
    r.response_format = ResponseFormat::json_schema;
    const json* spec = field(*format, "json_schema");
    if (!spec || !spec->is_object()) {
      return fail("response_format.json_schema", "'response_format.json_schema' must be an object");
    }
    const json* name = field(*spec, "name");
    if (!name || !valid_name(*name)) {
      return fail("response_format.json_schema.name", std::string("'response_format.json_schema.name'") + kNameRule);
    }
    if (const json* description = field(*spec, "description"); description && !description->is_string()) {
      return fail("response_format.json_schema.description", "'response_format.json_schema.description' must be a string");
    }
    if (const json* strict = field(*spec, "strict"); strict && !strict->is_boolean()) {
      return fail("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
    }
    if (const json* schema = field(*spec, "schema"); schema) {
      if (!schema->is_object()) {
        return fail("response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON Schema object");
      }
      r.response_schema = *schema;
    }
  }
  if (r.tool_choice == ToolChoice::required || r.tool_choice == ToolChoice::named) {
    return fail("response_format", "'response_format' " + type->dump() +
                                       " cannot be combined with a required or named 'tool_choice'");
  }
  return {};
}

std::expected<void, ApiError> parse_chat(const json& body, ParsedRequest& r) {
  if (const json* functions = field(body, "functions"); functions) {
    return fail("functions", "'functions' is deprecated and not supported; use 'tools'");
  }
  if (auto tools = parse_tools(body, r); !tools) return std::unexpected(tools.error());
  if (auto format = parse_response_format(body, r); !format) return std::unexpected(format.error());
  if (const json* audio = field(body, "audio"); audio) return fail("audio", "'audio' is not supported");
  auto messages = parse_messages(body, r.images);
  if (!messages) return std::unexpected(messages.error());
  r.messages = std::move(*messages);
  if (const json* effort = field(body, "reasoning_effort"); effort && !effort->is_null()) {
    // Checked against the chat format when the job is built (generation_route.cpp); here only
    // its shape: one of OpenAI's names, or a whole number (for formats with a numeric effort).
    static constexpr std::string_view kNames[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
    if (effort->is_string()) {
      r.reasoning_effort = effort->get<std::string>();
      if (std::find(std::begin(kNames), std::end(kNames), r.reasoning_effort) == std::end(kNames)) {
        return fail("reasoning_effort", "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, "
                                        "max, or a whole number");
      }
    } else if (effort->is_number_integer()) {
      r.reasoning_effort = effort->dump();
      r.reasoning_effort_numeric = true;
    } else {
      return fail("reasoning_effort", "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, "
                                      "max, or a whole number");
    }
  }
  auto logprobs = get_bool(body, "logprobs", false);
  if (!logprobs) return std::unexpected(logprobs.error());
  r.logprobs = *logprobs;
  auto top = get_int(body, "top_logprobs", 0, kMaxTopLogprobs);
  if (!top) return std::unexpected(top.error());
  if (*top && !r.logprobs) return fail("top_logprobs", "'top_logprobs' requires 'logprobs': true");
  r.top_logprobs = int(top->value_or(0));
  return {};
}

std::expected<void, ApiError> parse_completion(const json& body, ParsedRequest& r) {
  for (const char* refused : {"suffix", "best_of"}) {
    if (field(body, refused)) return fail(refused, std::string("'") + refused + "' is not supported");
  }
  auto echo = get_bool(body, "echo", false);
  if (!echo) return std::unexpected(echo.error());
  if (*echo) return fail("echo", "'echo' is not supported");
  const json* prompt = field(body, "prompt");
  if (!prompt) return fail("prompt", "'prompt' is required");
  const json* p = prompt;
  // One prompt per request (n = 1): ["text"] and [[ids]] are unwrapped, more than one refused.
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array() && !p->empty() && std::all_of(p->begin(), p->end(), [](const json& x) {
               return x.is_number_integer();
             })) {
    r.prompt_is_ids = true;
    for (const json& id : *p) {
      if (id.is_number_unsigned() ? id.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<int>::max())
                                  : (id.get<std::int64_t>() < 0 || id.get<std::int64_t>() > std::numeric_limits<int>::max())) {
        return fail("prompt", "'prompt' token id " + id.dump() + " is out of range");
      }
      r.prompt_ids.push_back(int(id.get<std::int64_t>()));
    }
  } else {
    return fail("prompt", "'prompt' must be a string, an array of one string, or an array of token ids");
  }
  auto logprobs = get_int(body, "logprobs", 0, kMaxCompletionLogprobs);
  if (!logprobs) return std::unexpected(logprobs.error());
  if (*logprobs) {
    r.logprobs = true;
    r.top_logprobs = int(**logprobs);
  }
  if (!r.max_tokens) r.max_tokens = 16;  // the spec's default for this endpoint
  return {};
}

}  // namespace

bool ParsedRequest::has_tool_history() const {
  return std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) { return !m.tool_calls.empty(); });
}

std::expected<ParsedRequest, ApiError> parse_request(Endpoint endpoint, std::string_view body_text, int max_json_depth) {
  auto parsed = parse_json_body(body_text, max_json_depth);
  if (!parsed) return std::unexpected(parsed.error());
  const json& body = *parsed;
  if (!body.is_object()) {
    return std::unexpected(ApiError{400, "request body must be a JSON object", "invalid_request_error", "", ""});
  }
  ParsedRequest r;
  r.endpoint = endpoint;
  if (auto common = parse_common(body, r); !common) return std::unexpected(common.error());
  auto specific = endpoint == Endpoint::chat ? parse_chat(body, r) : parse_completion(body, r);
  if (!specific) return std::unexpected(specific.error());
  return r;
}

}  // namespace waste::serve

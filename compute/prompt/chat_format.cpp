#include "compute/prompt/chat_format.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace waste {
namespace {

Status check_length(const std::string& value, const std::string& where) {
  if (value.size() > ChatFormat::kMaxFieldBytes) {
    return make_error(Errc::format, where + " is " + std::to_string(value.size()) + " bytes; at most " +
                                        std::to_string(ChatFormat::kMaxFieldBytes) + " are allowed");
  }
  return ok();
}

Status read_pair(const nlohmann::json& doc, const char* key, ChatAffixes& out, const std::string& origin) {
  if (!doc.contains(key)) return ok();
  const auto& value = doc[key];
  const std::string where = origin + ": \"" + key + "\"";
  if (!value.is_array() || value.size() != 2 || !value[0].is_string() || !value[1].is_string()) {
    return make_error(Errc::format, where + " must be an array of two strings [prefix, suffix]");
  }
  out.prefix = value[0].get<std::string>();
  out.suffix = value[1].get<std::string>();
  WASTE_TRY(check_length(out.prefix, where + "[0]"));
  WASTE_TRY(check_length(out.suffix, where + "[1]"));
  return ok();
}

Status read_string(const nlohmann::json& doc, const char* key, std::string& out, const std::string& origin) {
  if (!doc.contains(key)) return ok();
  const std::string where = origin + ": \"" + key + "\"";
  if (!doc[key].is_string()) return make_error(Errc::format, where + " must be a string");
  out = doc[key].get<std::string>();
  return check_length(out, where);
}

Result<ChatToolMarkup> read_tools(const nlohmann::json& doc, const std::string& origin) {
  const std::string where = origin + ": \"tools\"";
  if (!doc.is_object()) return make_error(Errc::format, where + " must be an object");
  for (const auto& [key, value] : doc.items()) {
    if (key != "style" && key != "declare" && key != "section" && key != "call" && key != "arguments" &&
        key != "result") {
      return make_error(Errc::format, where + ": unknown key \"" + key +
                                          "\" (expected style, declare, section, call, arguments, result)");
    }
  }
  ChatToolMarkup tools;
  std::string style = "json";
  WASTE_TRY(read_string(doc, "style", style, where));
  if (style == "kimi") {
    tools.style = ToolCallStyle::kimi;
  } else if (style != "json") {
    return make_error(Errc::format, where + ": \"style\" must be \"kimi\" or \"json\"");
  }
  WASTE_TRY(read_pair(doc, "declare", tools.declare, where));
  WASTE_TRY(read_pair(doc, "section", tools.section, where));
  WASTE_TRY(read_pair(doc, "call", tools.call, where));
  WASTE_TRY(read_string(doc, "arguments", tools.arguments, where));
  WASTE_TRY(read_pair(doc, "result", tools.result, where));
  // The output parser finds calls by these strings: without them a call could not be told from text.
  if (tools.call.prefix.empty() || tools.call.suffix.empty()) {
    return make_error(Errc::format, where + ": \"call\" needs a non-empty prefix and suffix");
  }
  if (tools.style == ToolCallStyle::kimi && tools.arguments.empty()) {
    return make_error(Errc::format, where + ": the kimi style needs \"arguments\" (the marker after the id)");
  }
  if (tools.section.prefix.empty() != tools.section.suffix.empty()) {
    return make_error(Errc::format, where + ": \"section\" needs both a prefix and a suffix, or neither");
  }
  return tools;
}

// Appends `text` with {name} and {id} replaced: the format's text as markup, the values as plain.
void append_template(std::vector<ChatSegment>& out, std::string_view text, std::string_view name,
                     std::string_view id) {
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t n = text.find("{name}", at);
    const std::size_t i = text.find("{id}", at);
    const std::size_t next = std::min(n, i);
    if (next == std::string_view::npos) break;
    if (next > at) out.push_back({std::string(text.substr(at, next - at)), true});
    const bool is_name = next == n;
    const std::string_view value = is_name ? name : id;
    if (!value.empty()) out.push_back({std::string(value), false});
    at = next + (is_name ? 6 : 4);
  }
  if (at < text.size()) out.push_back({std::string(text.substr(at)), true});
}

void append_markup(std::vector<ChatSegment>& out, const std::string& text) {
  if (!text.empty()) out.push_back({text, true});
}
void append_plain(std::vector<ChatSegment>& out, const std::string& text) {
  if (!text.empty()) out.push_back({text, false});
}

}  // namespace

std::string kimi_tool_call_id(std::string_view name, int index) {
  return "functions." + std::string(name) + ":" + std::to_string(index);
}

std::string kimi_tool_call_name(std::string_view id) {
  const std::size_t colon = id.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == id.size()) return {};
  for (std::size_t i = colon + 1; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return {};
  }
  const std::string_view head = id.substr(0, colon);
  if (head.find('<') != std::string_view::npos) return {};
  const std::size_t dot = head.rfind('.');
  return std::string(dot == std::string_view::npos ? head : head.substr(dot + 1));
}

const ChatAffixes& ChatFormat::affixes(ChatRole role) const noexcept {
  switch (role) {
    case ChatRole::system: return system;
    case ChatRole::assistant: return assistant;
    case ChatRole::user:
    case ChatRole::tool: break;
  }
  return user;
}

Result<ChatFormat> ChatFormat::parse(std::string_view json_text, std::string_view origin) {
  const std::string where(origin);
  if (json_text.size() > kMaxFileBytes) {
    return make_error(Errc::format, where + ": " + std::to_string(json_text.size()) + " bytes; a chat format is at most " +
                                        std::to_string(kMaxFileBytes));
  }
  const auto doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return make_error(Errc::format, where + ": not valid JSON");
  if (!doc.is_object()) return make_error(Errc::format, where + ": expected a JSON object");
  for (const auto& [key, value] : doc.items()) {
    if (key != "system" && key != "user" && key != "assistant" && key != "open" && key != "tools") {
      return make_error(Errc::format,
                        where + ": unknown key \"" + key + "\" (expected system, user, assistant, open, tools)");
    }
  }
  ChatFormat format;
  WASTE_TRY(read_pair(doc, "system", format.system, where));
  WASTE_TRY(read_pair(doc, "user", format.user, where));
  WASTE_TRY(read_pair(doc, "assistant", format.assistant, where));
  if (doc.contains("open")) {
    if (!doc["open"].is_string()) return make_error(Errc::format, where + ": \"open\" must be a string");
    format.open = doc["open"].get<std::string>();
    WASTE_TRY(check_length(format.open, where + ": \"open\""));
  }
  if (doc.contains("tools")) {
    auto tools = read_tools(doc["tools"], where);
    if (!tools) return std::unexpected(tools.error());
    format.tools = std::move(*tools);
  }
  return format;
}

Result<ChatFormat> ChatFormat::load(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return make_error(Errc::io, file.string() + ": cannot open");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return make_error(Errc::io, file.string() + ": read failed");
  return parse(buffer.str(), file.string());
}

Result<std::optional<ChatFormat>> ChatFormat::load_from_container(const std::filesystem::path& container_dir) {
  const std::filesystem::path file = container_dir / "chat.json";
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::optional<ChatFormat>{};
  auto format = load(file);
  if (!format) return std::unexpected(format.error());
  return std::optional<ChatFormat>(std::move(*format));
}

std::vector<ChatSegment> render_chat(const ChatFormat& format, std::span<const ChatMessage> messages,
                                     std::string_view tools_json, bool open_model_turn) {
  std::vector<ChatSegment> out;
  const ChatToolMarkup* tools = format.tools ? &*format.tools : nullptr;
  if (tools && !tools_json.empty()) {
    append_markup(out, tools->declare.prefix);
    append_plain(out, std::string(tools_json));
    append_markup(out, tools->declare.suffix);
  }
  // Kimi: the ids the model sees are functions.NAME:IDX (IDX counts calls in the conversation);
  // a client's other ids are mapped, and the map also names the function of each result.
  std::vector<std::pair<std::string, ChatToolCall>> calls_by_id;
  int call_count = 0;
  for (const ChatMessage& message : messages) {
    if (message.role == ChatRole::tool && tools) {
      std::string id = message.tool_call_id;
      std::string name = message.name;
      for (const auto& [client_id, call] : calls_by_id) {
        if (client_id != message.tool_call_id) continue;
        id = call.id;
        if (name.empty()) name = call.name;
      }
      append_template(out, tools->result.prefix, name.empty() ? "tool" : name, id);
      append_plain(out, message.content);
      append_template(out, tools->result.suffix, name.empty() ? "tool" : name, id);
      continue;
    }
    const ChatAffixes& affixes = format.affixes(message.role);
    append_markup(out, affixes.prefix);
    append_plain(out, message.content);
    if (tools && message.role == ChatRole::assistant && !message.tool_calls.empty()) {
      append_markup(out, tools->section.prefix);
      for (const ChatToolCall& call : message.tool_calls) {
        append_markup(out, tools->call.prefix);
        if (tools->style == ToolCallStyle::kimi) {
          ChatToolCall seen = call;
          if (kimi_tool_call_name(call.id) != call.name) seen.id = kimi_tool_call_id(call.name, call_count);
          calls_by_id.emplace_back(call.id, seen);
          append_plain(out, seen.id);
          append_markup(out, tools->arguments);
          append_plain(out, call.arguments);
        } else {
          calls_by_id.emplace_back(call.id, call);
          append_plain(out, "{\"name\": " + nlohmann::json(call.name).dump() + ", \"arguments\": " + call.arguments + "}");
        }
        append_markup(out, tools->call.suffix);
        ++call_count;
      }
      append_markup(out, tools->section.suffix);
    }
    append_markup(out, affixes.suffix);
  }
  if (open_model_turn) append_markup(out, format.open_turn());
  return out;
}

std::vector<int> build_chat_prompt(const Tokenizer& tokenizer, const ChatFormat& format,
                                   std::span<const ChatMessage> messages, bool open_model_turn,
                                   std::string_view tools_json) {
  std::vector<int> ids;
  for (const ChatSegment& segment : render_chat(format, messages, tools_json, open_model_turn)) {
    if (segment.markup) {
      tokenizer.encode_markup(segment.text, ids);
    } else {
      tokenizer.encode(segment.text, ids);
    }
  }
  return ids;
}

ChatStop chat_stop(const Tokenizer& tokenizer, const ChatFormat& format) {
  ChatStop stop{format.assistant.suffix, {tokenizer.eos()}};
  const std::vector<int> suffix = tokenizer.encode_markup(format.assistant.suffix);
  if (!suffix.empty() && tokenizer.is_special(suffix.front()) &&
      std::find(stop.ids.begin(), stop.ids.end(), suffix.front()) == stop.ids.end()) {
    stop.ids.push_back(suffix.front());
  }
  return stop;
}

}  // namespace waste

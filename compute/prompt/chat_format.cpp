#include "compute/prompt/chat_format.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "compute/convert/shipped_chat.hpp"
#include "compute/prompt/dsml.hpp"

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

constexpr std::string_view kToolsPlaceholder = "{tools}";

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
  } else if (style == "glm") {
    tools.style = ToolCallStyle::glm;
  } else if (style == "dsml") {
    tools.style = ToolCallStyle::dsml;
  } else if (style != "json") {
    return make_error(Errc::format, where + ": \"style\" must be \"kimi\", \"json\", \"glm\" or \"dsml\"");
  }
  if (doc.contains("declare") && doc["declare"].is_array() && doc["declare"].size() == 3) {
    const auto& declare = doc["declare"];
    const std::string at = where + ": \"declare\"";
    if (!declare[0].is_string() || !declare[1].is_string() || !declare[2].is_string()) {
      return make_error(Errc::format, at + " must be an array of strings [prefix, suffix] or [prefix, body, suffix]");
    }
    tools.declare = {declare[0].get<std::string>(), declare[2].get<std::string>()};
    tools.declare_body = declare[1].get<std::string>();
    WASTE_TRY(check_length(tools.declare.prefix, at + "[0]"));
    WASTE_TRY(check_length(tools.declare.suffix, at + "[2]"));
    const std::size_t first = tools.declare_body.find(kToolsPlaceholder);
    if (first == std::string::npos || tools.declare_body.find(kToolsPlaceholder, first + 1) != std::string::npos) {
      return make_error(Errc::format, at + "[1] must hold {tools} once, where the tool list goes");
    }
  } else if (doc.contains("declare")) {
    const auto& declare = doc["declare"];
    if (!declare.is_array() || declare.size() != 2 || !declare[0].is_string() || !declare[1].is_string()) {
      return make_error(Errc::format, where + ": \"declare\" must be an array of strings [prefix, suffix] or "
                                              "[prefix, body, suffix]");
    }
    WASTE_TRY(read_pair(doc, "declare", tools.declare, where));
  }
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

Result<ChatEffort> read_effort(const nlohmann::json& doc, const std::string& origin) {
  const std::string where = origin + ": \"effort\"";
  if (!doc.is_object()) return make_error(Errc::format, where + " must be an object");
  for (const auto& [key, value] : doc.items()) {
    if (key != "turn" && key != "levels" && key != "range" && key != "default") {
      return make_error(Errc::format, where + ": unknown key \"" + key + "\" (expected turn, levels, range, default)");
    }
  }
  ChatEffort effort;
  WASTE_TRY(read_string(doc, "turn", effort.turn, where));
  if (effort.turn.find("{effort}") == std::string::npos) {
    return make_error(Errc::format, where + ": \"turn\" must hold {effort} where the level goes");
  }
  if (doc.contains("levels")) {
    const auto& levels = doc["levels"];
    if (!levels.is_object() || levels.empty()) {
      return make_error(Errc::format, where + ": \"levels\" must be an object of level names to their text");
    }
    for (const auto& [key, value] : levels.items()) {
      const std::string at = where + ": \"levels\".\"" + key + "\"";
      if (key.empty() || !value.is_string() || value.get_ref<const std::string&>().empty()) {
        return make_error(Errc::format, at + " must be a non-empty string under a non-empty name");
      }
      WASTE_TRY(check_length(key, at + " (the name)"));
      WASTE_TRY(check_length(value.get<std::string>(), at));
      effort.levels.emplace_back(key, value.get<std::string>());
    }
  }
  if (doc.contains("range")) {
    const auto& range = doc["range"];
    if (!range.is_array() || range.size() != 2 || !range[0].is_number_integer() || !range[1].is_number_integer() ||
        range[0].get<long long>() > range[1].get<long long>()) {
      return make_error(Errc::format, where + ": \"range\" must be [min, max], two whole numbers with min <= max");
    }
    effort.range.emplace(range[0].get<long long>(), range[1].get<long long>());
  }
  if (effort.levels.empty() && !effort.range) {
    return make_error(Errc::format, where + " needs \"levels\" or \"range\" (what a request may ask for)");
  }
  WASTE_TRY(read_string(doc, "default", effort.fallback, where));
  if (!effort.fallback.empty()) {
    const bool named = std::any_of(effort.levels.begin(), effort.levels.end(),
                                   [&](const auto& level) { return level.first == effort.fallback; });
    if (!named) return make_error(Errc::format, where + ": \"default\" must name one of \"levels\"");
  }
  return effort;
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
  static constexpr std::string_view kKeys[] = {"encoding", "prelude", "system", "user",  "assistant", "open", "stop",
                                               "think",   "think_history", "effort", "image", "tools"};
  for (const auto& [key, value] : doc.items()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
      return make_error(Errc::format, where + ": unknown key \"" + key +
                                          "\" (expected encoding, prelude, system, user, assistant, open, stop, think, "
                                          "think_history, effort, image, tools)");
    }
  }
  ChatFormat format;
  std::string encoding = "affixes";
  WASTE_TRY(read_string(doc, "encoding", encoding, where));
  if (encoding == "dsml") {
    format.encoding = ChatEncoding::dsml;
  } else if (encoding != "affixes") {
    return make_error(Errc::format, where + ": \"encoding\" must be \"affixes\" or \"dsml\"");
  }
  WASTE_TRY(read_string(doc, "prelude", format.prelude, where));
  WASTE_TRY(read_string(doc, "stop", format.stop, where));
  WASTE_TRY(read_string(doc, "image", format.image, where));
  if (doc.contains("think")) {
    const auto& think = doc["think"];
    if (!think.is_array() || think.size() != 2 || !think[0].is_string() || !think[1].is_string() ||
        think[0].get_ref<const std::string&>().empty() || think[1].get_ref<const std::string&>().empty()) {
      return make_error(Errc::format, where + ": \"think\" must be an array of two non-empty strings [open, close]");
    }
    ChatAffixes pair{think[0].get<std::string>(), think[1].get<std::string>()};
    WASTE_TRY(check_length(pair.prefix, where + ": \"think\"[0]"));
    WASTE_TRY(check_length(pair.suffix, where + ": \"think\"[1]"));
    format.think = std::move(pair);
  }
  if (doc.contains("think_history")) {
    const auto& history = doc["think_history"];
    if (!format.think) return make_error(Errc::format, where + ": \"think_history\" needs a \"think\" pair");
    if (history == "keep") {
      format.think_history = ThinkHistory::keep;
    } else if (history != "current") {
      return make_error(Errc::format, where + ": \"think_history\" must be \"current\" or \"keep\"");
    }
  }
  if (doc.contains("effort")) {
    auto effort = read_effort(doc["effort"], where);
    if (!effort) return std::unexpected(effort.error());
    format.effort = std::move(*effort);
  }
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
  const bool dsml_tools = format.tools && format.tools->style == ToolCallStyle::dsml;
  if (dsml_tools != (format.encoding == ChatEncoding::dsml && format.tools.has_value())) {
    return make_error(Errc::format, where + ": the dsml tools style and the dsml encoding go together");
  }
  if (dsml_tools && (format.tools->declare_body.empty() || format.tools->section.prefix.empty())) {
    return make_error(Errc::format, where + ": the dsml tools style needs \"declare\" as [prefix, body, suffix] "
                                            "and a \"section\" (the calls block's markers)");
  }
  if (format.encoding == ChatEncoding::dsml && !format.think) {
    return make_error(Errc::format, where + ": the dsml encoding needs a \"think\" pair");
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

namespace {

// The function objects of a tools array (each tool's "function", else the tool itself).
std::vector<nlohmann::json> declared_functions(std::string_view tools_json) {
  std::vector<nlohmann::json> out;
  const auto tools = nlohmann::json::parse(tools_json, nullptr, false);
  if (!tools.is_array()) return out;
  for (const auto& tool : tools) {
    nlohmann::json function = tool.is_object() && tool.contains("function") ? tool["function"] : tool;
    if (function.is_object()) {
      function.erase("strict");
      function.erase("defer_loading");
    }
    out.push_back(std::move(function));
  }
  return out;
}

void append_glm_call(std::vector<ChatSegment>& out, const ChatToolMarkup& tools, const ChatToolCall& call) {
  append_markup(out, tools.call.prefix);
  append_plain(out, call.name);
  const auto arguments = nlohmann::json::parse(call.arguments, nullptr, false);
  if (arguments.is_object()) {
    for (const auto& [key, value] : arguments.items()) {
      append_markup(out, std::string(kGlmKeyOpen));
      append_plain(out, key);
      append_markup(out, std::string(kGlmKeyClose) + std::string(kGlmValueOpen));
      append_plain(out, value.is_string() ? value.get<std::string>() : python_json(value));
      append_markup(out, std::string(kGlmValueClose));
    }
  }
  append_markup(out, tools.call.suffix);
}

}  // namespace

std::string python_json(const nlohmann::json& value) {
  const auto dump = [](const nlohmann::json& v) { return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); };
  if (value.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, item] : value.items()) {
      if (!first) out += ", ";
      first = false;
      out += dump(nlohmann::json(key)) + ": " + python_json(item);
    }
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + python_json(value[i]);
    return out + "]";
  }
  return dump(value);
}

const std::string& shipped_glm_declare_body() {
  static const std::string body = [] {
    // The file's own text, compiled in; its tools.declare is [prefix, body, suffix].
    const auto doc = nlohmann::json::parse(convert::kShippedGlmChat, nullptr, false);
    return doc.is_object() && doc.contains("tools") && doc["tools"].contains("declare") &&
                   doc["tools"]["declare"].is_array() && doc["tools"]["declare"].size() == 3
               ? doc["tools"]["declare"][1].get<std::string>()
               : std::string(kToolsPlaceholder);
  }();
  return body;
}

std::string glm_tools_declaration(std::string_view tools_json) {
  std::string out;
  for (const nlohmann::json& function : declared_functions(tools_json)) out += python_json(function) + "\n";
  return out;
}

Result<std::string> resolve_effort(const ChatFormat& format, std::string_view requested, bool numeric) {
  if (!format.effort) {
    return make_error(Errc::argument, "this model's chat format has no reasoning effort (\"effort\" in chat.json)");
  }
  const ChatEffort& effort = *format.effort;
  std::string names;
  for (const auto& [name, text] : effort.levels) names += (names.empty() ? "" : ", ") + name;
  const std::string range = effort.range ? "a whole number from " + std::to_string(effort.range->first) + " to " +
                                               std::to_string(effort.range->second)
                                         : std::string();
  const std::string expected = names.empty() ? range : range.empty() ? "one of " + names : "one of " + names + ", or " + range;
  if (requested.empty()) requested = effort.fallback;
  if (requested.empty()) return std::string();
  if (numeric) {
    long long n = 0;
    const auto [end, ec] = std::from_chars(requested.data(), requested.data() + requested.size(), n);
    if (!effort.range || ec != std::errc() || end != requested.data() + requested.size() || n < effort.range->first ||
        n > effort.range->second) {
      return make_error(Errc::argument, "must be " + expected + " for this model, not " + std::string(requested));
    }
    return std::to_string(n);
  }
  for (const auto& [name, text] : effort.levels) {
    if (name == requested) return text;
  }
  return make_error(Errc::argument, "must be " + expected + " for this model, not \"" + std::string(requested) + "\"");
}

std::vector<ChatSegment> render_chat(const ChatFormat& format, std::span<const ChatMessage> messages,
                                     std::string_view tools_json, bool open_model_turn) {
  ChatRender options;
  options.tools_json = tools_json;
  options.open_model_turn = open_model_turn;
  return render_chat(format, messages, options);
}

std::vector<ChatSegment> render_chat(const ChatFormat& format, std::span<const ChatMessage> messages,
                                     const ChatRender& options) {
  if (format.encoding == ChatEncoding::dsml) return render_dsml(format, messages, options);
  std::vector<ChatSegment> out;
  const ChatToolMarkup* tools = format.tools ? &*format.tools : nullptr;
  if (options.start) {
    append_markup(out, format.prelude);
    if (format.effort) {
      std::string level(options.effort);
      if (level.empty()) {
        if (auto fallback = resolve_effort(format, {}, false)) level = *fallback;
      }
      if (!level.empty()) {
        std::string turn = format.effort->turn;
        turn.replace(turn.find("{effort}"), 8, level);
        append_markup(out, turn);
      }
    }
    if (tools && !options.tools_json.empty()) {
      const bool glm = tools->style == ToolCallStyle::glm;
      // The body's text is the format's (markup: GLM's instructions name its call markers), the
      // tool list the request's (plain).
      const std::string& body = !tools->declare_body.empty() ? tools->declare_body
                                : glm                          ? shipped_glm_declare_body()
                                                               : std::string();
      const std::size_t at = body.find(kToolsPlaceholder);
      append_markup(out, tools->declare.prefix);
      if (at != std::string::npos) append_markup(out, body.substr(0, at));
      append_plain(out, glm ? glm_tools_declaration(options.tools_json) : std::string(options.tools_json));
      if (at != std::string::npos) append_markup(out, body.substr(at + kToolsPlaceholder.size()));
      append_markup(out, tools->declare.suffix);
    }
  }
  // Which assistant turns keep their reasoning: all, or those after the last answer without calls.
  std::size_t keep_from = 0;
  if (format.think && format.think_history == ThinkHistory::current) {
    for (std::size_t i = messages.size(); i-- > 0;) {
      if (messages[i].role == ChatRole::assistant && messages[i].tool_calls.empty()) {
        keep_from = i + 1;
        break;
      }
    }
  }
  // Kimi: the ids the model sees are functions.NAME:IDX (IDX counts calls in the conversation);
  // a client's other ids are mapped, and the map also names the function of each result.
  std::vector<std::pair<std::string, ChatToolCall>> calls_by_id;
  int call_count = 0;
  for (std::size_t index = 0; index < messages.size(); ++index) {
    const ChatMessage& message = messages[index];
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
    if (format.think && message.role == ChatRole::assistant) {
      append_markup(out, format.think->prefix);
      if (index >= keep_from) append_plain(out, message.reasoning);
      append_markup(out, format.think->suffix);
    }
    append_plain(out, message.content);
    if (tools && message.role == ChatRole::assistant && !message.tool_calls.empty()) {
      append_markup(out, tools->section.prefix);
      for (const ChatToolCall& call : message.tool_calls) {
        if (tools->style == ToolCallStyle::glm) {
          calls_by_id.emplace_back(call.id, call);
          append_glm_call(out, *tools, call);
          ++call_count;
          continue;
        }
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
  if (options.open_model_turn) {
    append_markup(out, format.open_turn());
    if (format.think) {
      append_markup(out, format.think->prefix);
      if (!options.thinking) append_markup(out, format.think->suffix);
    }
  }
  return out;
}

std::vector<int> tokenize_segments(const Tokenizer& tokenizer, std::span<const ChatSegment> segments) {
  std::vector<int> ids;
  for (const ChatSegment& segment : segments) {
    if (segment.markup) {
      tokenizer.encode_markup(segment.text, ids);
    } else {
      tokenizer.encode(segment.text, ids);
    }
  }
  return ids;
}

std::vector<int> build_chat_prompt(const Tokenizer& tokenizer, const ChatFormat& format,
                                   std::span<const ChatMessage> messages, bool open_model_turn,
                                   std::string_view tools_json) {
  return tokenize_segments(tokenizer, render_chat(format, messages, tools_json, open_model_turn));
}

std::vector<int> build_chat_prompt(const Tokenizer& tokenizer, const ChatFormat& format,
                                   std::span<const ChatMessage> messages, const ChatRender& options) {
  return tokenize_segments(tokenizer, render_chat(format, messages, options));
}

ChatStop chat_stop(const Tokenizer& tokenizer, const ChatFormat& format) {
  ChatStop stop{format.stop_text(), tokenizer.eos_ids()};  // every eos of the config (GLM: a list of 3)
  // A special that also opens the think pair's close (K3: <|close|>) cannot end the reply at once:
  // the reasoning's end would end it. The stop text still does.
  const std::vector<int> close = format.think ? tokenizer.encode_markup(format.think->suffix) : std::vector<int>{};
  auto add_first_special = [&](const std::string& text) {
    const std::vector<int> ids = tokenizer.encode_markup(text);
    if (!ids.empty() && tokenizer.is_special(ids.front()) && (close.empty() || close.front() != ids.front()) &&
        std::find(stop.ids.begin(), stop.ids.end(), ids.front()) == stop.ids.end()) {
      stop.ids.push_back(ids.front());
    }
  };
  add_first_special(format.stop_text());
  if (format.tools && format.tools->style == ToolCallStyle::glm) add_first_special(format.tools->result.prefix);
  return stop;
}

}  // namespace waste

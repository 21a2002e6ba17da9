#include "compute/prompt/dsml.hpp"

#include <algorithm>
#include <cstddef>

#include <nlohmann/json.hpp>

namespace waste {
namespace {

using ordered = nlohmann::ordered_json;

// JSON with ", " and ": " between items (the format's schemas and non-string values), keys in
// their original order, non-ASCII text as it is.
std::string spaced_json(const ordered& value) {
  const auto dump = [](const ordered& v) { return v.dump(-1, ' ', false, ordered::error_handler_t::replace); };
  if (value.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, item] : value.items()) {
      out += first ? "" : ", ";
      first = false;
      out += dump(ordered(key)) + ": " + spaced_json(item);
    }
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + spaced_json(value[i]);
    return out + "]";
  }
  return dump(value);
}

void markup(std::vector<ChatSegment>& out, std::string_view text) {
  if (text.empty()) return;
  if (!out.empty() && out.back().markup) {
    out.back().text += text;
    return;
  }
  out.push_back({std::string(text), true});
}
void plain(std::vector<ChatSegment>& out, std::string_view text) {
  if (text.empty()) return;
  if (!out.empty() && !out.back().markup) {
    out.back().text += text;
    return;
  }
  out.push_back({std::string(text), false});
}

// One piece of a user turn after merging: text, or a tool's result.
struct Block {
  bool result = false;
  std::string text;
  std::string call_id;  // result: the call it answers
};

// A message after tool results are folded into user turns.
struct Turn {
  ChatRole role = ChatRole::user;
  const ChatMessage* message = nullptr;  // system / assistant
  std::vector<Block> blocks;             // user
  bool declares_tools = false;           // system: the tool declaration follows its text
};

std::vector<Turn> merge_turns(std::span<const ChatMessage> messages) {
  std::vector<Turn> turns;
  for (const ChatMessage& message : messages) {
    if (message.role == ChatRole::user || message.role == ChatRole::tool) {
      Block block{message.role == ChatRole::tool, message.content, message.tool_call_id};
      if (turns.empty() || turns.back().role != ChatRole::user) turns.push_back({ChatRole::user, nullptr, {}, false});
      turns.back().blocks.push_back(std::move(block));
      continue;
    }
    turns.push_back({message.role, &message, {}, false});
  }
  // Results in the order of the calls of the latest assistant turn with calls (unknown ids first).
  std::vector<std::string> order;
  for (Turn& turn : turns) {
    if (turn.role == ChatRole::assistant && !turn.message->tool_calls.empty()) {
      order.clear();
      for (const ChatToolCall& call : turn.message->tool_calls) order.push_back(call.id);
    }
    if (turn.role != ChatRole::user || order.empty()) continue;
    std::vector<Block> results;
    for (const Block& block : turn.blocks) {
      if (block.result) results.push_back(block);
    }
    if (results.size() < 2) continue;
    auto rank = [&](const Block& b) {
      const auto it = std::find(order.begin(), order.end(), b.call_id);
      return it == order.end() ? std::ptrdiff_t{0} : it - order.begin();
    };
    std::stable_sort(results.begin(), results.end(), [&](const Block& a, const Block& b) { return rank(a) < rank(b); });
    std::size_t next = 0;
    for (Block& block : turn.blocks) {
      if (block.result) block = results[next++];
    }
  }
  return turns;
}

}  // namespace

std::string dsml_tool_schemas(std::string_view tools_json) {
  const auto tools = ordered::parse(tools_json, nullptr, false);
  std::string out;
  if (!tools.is_array()) return out;
  for (const auto& tool : tools) {
    ordered function = tool.is_object() && tool.contains("function") ? tool["function"] : tool;
    if (function.is_object()) {
      function.erase("strict");
      function.erase("defer_loading");
    }
    if (!out.empty()) out += '\n';
    out += spaced_json(function);
  }
  return out;
}

namespace {

// One call as segments: the format's markers markup, the name, keys and values plain.
void append_invoke(std::vector<ChatSegment>& out, const ChatToolMarkup& format, const ChatToolCall& call) {
  auto arguments = ordered::parse(call.arguments, nullptr, false);
  // Arguments sent as a JSON string holding the object (some clients double-encode).
  if (arguments.is_string()) {
    auto inner = ordered::parse(arguments.get<std::string>(), nullptr, false);
    if (!inner.is_discarded()) arguments = std::move(inner);
  }
  markup(out, format.call.prefix + " name=\"");
  plain(out, call.name);
  markup(out, "\">\n");
  auto parameter = [&](const std::string& key, bool is_string, const std::string& value) {
    markup(out, kDsmlParameterOpen);
    plain(out, key);
    markup(out, is_string ? "\" string=\"true\">" : "\" string=\"false\">");
    plain(out, value);
    markup(out, kDsmlParameterClose);
  };
  if (arguments.is_object()) {
    bool first = true;
    for (const auto& [key, value] : arguments.items()) {
      if (!first) markup(out, "\n");
      first = false;
      parameter(key, value.is_string(), value.is_string() ? value.get<std::string>() : spaced_json(value));
    }
  } else {
    parameter("arguments", false, arguments.is_discarded() ? call.arguments : spaced_json(arguments));
  }
  markup(out, "\n");
  markup(out, format.call.suffix);
}

}  // namespace

std::string dsml_invoke(const ChatToolMarkup& format, const ChatToolCall& call) {
  std::vector<ChatSegment> segments;
  append_invoke(segments, format, call);
  std::string text;
  for (const ChatSegment& segment : segments) text += segment.text;
  return text;
}

std::vector<ChatSegment> render_dsml(const ChatFormat& format, std::span<const ChatMessage> messages,
                                     const ChatRender& options) {
  std::vector<ChatSegment> out;
  const bool thinking = options.thinking && format.think.has_value();
  const std::string think_open = format.think ? format.think->prefix : std::string();
  const std::string think_close = format.think ? format.think->suffix : std::string();
  const ChatToolMarkup* tools = format.tools ? &*format.tools : nullptr;
  const bool declare = tools && !options.tools_json.empty() && options.start;

  std::vector<Turn> turns = merge_turns(messages);
  if (declare) {
    if (turns.empty() || turns.front().role != ChatRole::system) {
      turns.insert(turns.begin(), Turn{ChatRole::system, nullptr, {}, false});
    }
    turns.front().declares_tools = true;
  }
  // Earlier reasoning is dropped unless tools are declared (a tool chain needs its reasoning).
  const bool drop = !(tools && !options.tools_json.empty());
  // A continuation's first turn is not the conversation's first.
  const std::size_t base = options.start ? 0 : 1;
  std::ptrdiff_t last_user = -1;  // the last user turn or mid-conversation system turn
  for (std::size_t i = 0; i < turns.size(); ++i) {
    const bool asks = turns[i].role == ChatRole::user || (turns[i].role == ChatRole::system && i + base > 0);
    if (asks) last_user = std::ptrdiff_t(i);
  }

  if (options.start) markup(out, format.prelude);
  std::string effort;
  if (thinking && options.start && format.effort) {
    std::string level(options.effort);
    if (level.empty()) {
      if (auto fallback = resolve_effort(format, {}, false)) level = *fallback;
    }
    if (!level.empty()) {
      effort = format.effort->turn;
      effort.replace(effort.find("{effort}"), 8, level);
    }
  }
  for (std::size_t i = 0; i < turns.size(); ++i) {
    const Turn& turn = turns[i];
    const bool first = i + base == 0;
    if (first && (!effort.empty() || turn.role == ChatRole::system)) {
      markup(out, format.system.prefix);
      markup(out, effort);
    }
    switch (turn.role) {
      case ChatRole::system: {
        if (!first) markup(out, format.system.prefix);
        if (turn.message) plain(out, turn.message->content);
        if (turn.declares_tools) {
          const std::string& body = tools->declare_body;
          const std::size_t at = body.find("{tools}");
          markup(out, tools->declare.prefix);
          markup(out, body.substr(0, at));
          plain(out, dsml_tool_schemas(options.tools_json));
          if (at != std::string::npos) markup(out, body.substr(at + 7));
          markup(out, tools->declare.suffix);
        }
        markup(out, format.system.suffix);
        break;
      }
      case ChatRole::user:
      case ChatRole::tool: {
        markup(out, format.user.prefix);
        for (std::size_t b = 0; b < turn.blocks.size(); ++b) {
          if (b > 0) markup(out, "\n\n");
          const Block& block = turn.blocks[b];
          if (block.result && tools) markup(out, tools->result.prefix);
          plain(out, block.text);
          if (block.result && tools) markup(out, tools->result.suffix);
        }
        markup(out, format.user.suffix);
        break;
      }
      case ChatRole::assistant: {
        const ChatMessage& message = *turn.message;
        if (thinking && (!drop || std::ptrdiff_t(i) > last_user)) {
          plain(out, message.reasoning);
          markup(out, think_close);
        }
        plain(out, message.content);
        if (tools && !message.tool_calls.empty()) {
          markup(out, tools->section.prefix);
          markup(out, "\n");
          for (std::size_t c = 0; c < message.tool_calls.size(); ++c) {
            if (c > 0) markup(out, "\n");
            const ChatToolCall& call = message.tool_calls[c];
            append_invoke(out, *tools, call);
          }
          markup(out, "\n");
          markup(out, tools->section.suffix);
        }
        markup(out, format.assistant.suffix);
        break;
      }
    }
    // The model's turn opens after a user or mid-conversation system turn that an assistant turn
    // follows (or that ends the conversation, when the model's turn is wanted).
    const bool last = i + 1 == turns.size();
    if (!last && turns[i + 1].role != ChatRole::assistant) continue;
    if (last && !options.open_model_turn) continue;
    if (turn.role == ChatRole::user || (turn.role == ChatRole::system && !first)) {
      markup(out, format.open_turn());
      markup(out, thinking && (!drop || std::ptrdiff_t(i) >= last_user) ? think_open : think_close);
    }
  }
  return out;
}

Result<DsmlCall> parse_dsml_invoke(std::string_view body) {
  constexpr std::string_view kName = " name=\"";
  if (!body.starts_with(kName)) return make_error(Errc::format, "DSML invoke: expected name=\"…\" after the invoke marker");
  const std::size_t name_end = body.find("\">", kName.size());
  if (name_end == std::string_view::npos) return make_error(Errc::format, "DSML invoke: the name is not closed by \">");
  DsmlCall call;
  call.name = std::string(body.substr(kName.size(), name_end - kName.size()));
  if (call.name.empty() || call.name.find_first_of("\"\n\r<>") != std::string::npos) {
    return make_error(Errc::format, "DSML invoke: the function name is empty or not a name");
  }
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  std::size_t at = name_end + 2;
  std::string json = "{";
  std::vector<std::string> keys;
  while (true) {
    while (at < body.size() && is_space(body[at])) ++at;
    if (at == body.size()) break;
    if (!body.substr(at).starts_with(kDsmlParameterOpen)) {
      return make_error(Errc::format, "DSML invoke \"" + call.name + "\": text outside a parameter");
    }
    at += kDsmlParameterOpen.size();
    const std::size_t key_end = body.find("\" string=\"", at);
    if (key_end == std::string_view::npos) {
      return make_error(Errc::format, "DSML invoke \"" + call.name + "\": a parameter without string=\"true|false\"");
    }
    const std::string key(body.substr(at, key_end - at));
    at = key_end + 10;
    bool is_string;
    if (body.substr(at).starts_with("true\">")) {
      is_string = true;
      at += 6;
    } else if (body.substr(at).starts_with("false\">")) {
      is_string = false;
      at += 7;
    } else {
      return make_error(Errc::format, "DSML invoke \"" + call.name + "\": parameter \"" + key +
                                          "\" has string= other than \"true\" or \"false\"");
    }
    const std::size_t value_end = body.find(kDsmlParameterClose, at);
    if (value_end == std::string_view::npos) {
      return make_error(Errc::format, "DSML invoke \"" + call.name + "\": parameter \"" + key + "\" is not closed");
    }
    if (key.empty() || std::find(keys.begin(), keys.end(), key) != keys.end()) {
      return make_error(Errc::format, "DSML invoke \"" + call.name + "\": parameter name \"" + key +
                                          "\" is empty or repeated");
    }
    keys.push_back(key);
    const std::string_view value = body.substr(at, value_end - at);
    std::string encoded;
    if (is_string) {
      encoded = ordered(std::string(value)).dump(-1, ' ', false, ordered::error_handler_t::replace);
    } else {
      const auto parsed = ordered::parse(value, nullptr, false);
      if (parsed.is_discarded()) {
        return make_error(Errc::format, "DSML invoke \"" + call.name + "\": parameter \"" + key +
                                            "\" is marked string=\"false\" but is not JSON");
      }
      encoded = parsed.dump(-1, ' ', false, ordered::error_handler_t::replace);
    }
    if (keys.size() > 1) json += ',';
    json += ordered(key).dump(-1, ' ', false, ordered::error_handler_t::replace);
    json += ':';
    json += encoded;
    at = value_end + kDsmlParameterClose.size();
  }
  call.arguments = json + "}";
  return call;
}

}  // namespace waste

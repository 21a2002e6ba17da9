#include "compute/prompt/tool_call_parser.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "compute/prompt/dsml.hpp"

namespace waste {
namespace {

// A call header longer than this without its end is not a call (bounds what is held back).
constexpr std::size_t kMaxHeaderBytes = 512;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The longest proper suffix of `text` that begins `marker` (kept until the next text decides).
std::size_t partial_marker(std::string_view text, std::string_view marker) {
  for (std::size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (marker.starts_with(text.substr(text.size() - n))) return n;
  }
  return 0;
}

std::size_t skip_space(std::string_view text, std::size_t at) {
  while (at < text.size() && is_space(text[at])) ++at;
  return at;
}

}  // namespace

ToolCallParser::ToolCallParser(const ChatToolMarkup& markup, std::string id_prefix)
    : markup_(markup), id_prefix_(std::move(id_prefix)) {}

std::vector<ToolCallEvent> ToolCallParser::push(std::string_view text) {
  pending_ += text;
  std::vector<ToolCallEvent> out;
  run(out, false);
  return out;
}

std::vector<ToolCallEvent> ToolCallParser::finish() {
  std::vector<ToolCallEvent> out;
  run(out, true);
  return out;
}

void ToolCallParser::run(std::vector<ToolCallEvent>& out, bool final) {
  while (step(out, final)) {
  }
}

void ToolCallParser::content(std::vector<ToolCallEvent>& out, std::string text) {
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == ToolCallEvent::Kind::content) {
    out.back().text += text;
    return;
  }
  out.push_back({ToolCallEvent::Kind::content, 0, std::move(text), {}, {}});
}

void ToolCallParser::give_back(std::vector<ToolCallEvent>& out) {
  content(out, std::move(raw_));
  raw_.clear();
  in_section_ = false;
  state_ = State::text;
}

bool ToolCallParser::step(std::vector<ToolCallEvent>& out, bool final) {
  switch (state_) {
    case State::text: {
      const bool sections = !markup_.section.prefix.empty();
      const std::string& marker = sections ? markup_.section.prefix : markup_.call.prefix;
      const std::size_t at = pending_.find(marker);
      if (at != std::string::npos) {
        content(out, pending_.substr(0, at));
        raw_ = marker;
        pending_.erase(0, at + marker.size());
        in_section_ = sections;
        state_ = sections ? State::section : State::header;
        return true;
      }
      const std::size_t keep = final ? 0 : partial_marker(pending_, marker);
      content(out, pending_.substr(0, pending_.size() - keep));
      pending_.erase(0, pending_.size() - keep);
      return false;
    }
    case State::section: {
      const std::size_t at = skip_space(pending_, 0);
      const std::string_view rest = std::string_view(pending_).substr(at);
      if (rest.starts_with(markup_.call.prefix)) {
        raw_ += pending_.substr(0, at + markup_.call.prefix.size());
        pending_.erase(0, at + markup_.call.prefix.size());
        state_ = State::header;
        return true;
      }
      if (rest.starts_with(markup_.section.suffix)) {
        pending_.erase(0, at + markup_.section.suffix.size());
        raw_.clear();
        in_section_ = false;
        state_ = State::text;
        return true;
      }
      const bool maybe = std::string_view(markup_.call.prefix).starts_with(rest) ||
                         std::string_view(markup_.section.suffix).starts_with(rest);
      if (maybe && !final) return false;
      give_back(out);
      return true;
    }
    case State::header: {
      if (markup_.style == ToolCallStyle::json) return header_json(out, final);
      if (markup_.style == ToolCallStyle::glm || markup_.style == ToolCallStyle::dsml) return call_marked(out, final);
      const std::size_t at = pending_.find(markup_.arguments);
      if (at == std::string::npos) {
        if (!final && pending_.size() <= kMaxHeaderBytes) return false;
        give_back(out);
        return true;
      }
      const std::size_t begin = skip_space(pending_, 0);
      std::size_t end = at;
      while (end > begin && is_space(pending_[end - 1])) --end;
      const std::string id = pending_.substr(begin, end - begin);
      const std::string name = kimi_tool_call_name(id);
      if (name.empty() || id.find_first_of("\n\r") != std::string::npos) {
        give_back(out);
        return true;
      }
      pending_.erase(0, at + markup_.arguments.size());
      raw_.clear();
      out.push_back({ToolCallEvent::Kind::call_start, calls_++, {}, id, name});
      state_ = State::arguments;
      return true;
    }
    case State::arguments: {
      const std::string& marker = markup_.call.suffix;
      const std::size_t at = pending_.find(marker);
      const bool json_style = markup_.style == ToolCallStyle::json;
      std::size_t keep_from;  // pending_[keep_from..] is held back
      if (at != std::string::npos || final) {
        keep_from = at != std::string::npos ? at : pending_.size();
      } else {
        keep_from = pending_.size() - partial_marker(pending_, marker);
      }
      std::size_t end = keep_from;
      if (json_style && (at != std::string::npos || !final)) {
        // The JSON form's closing brace (and spaces around it) belongs to the wrapper, not the arguments.
        while (end > 0 && is_space(pending_[end - 1])) --end;
        if (end > 0 && pending_[end - 1] == '}') --end;
        while (end > 0 && is_space(pending_[end - 1])) --end;
      }
      if (end > 0) out.push_back({ToolCallEvent::Kind::arguments, calls_ - 1, pending_.substr(0, end), {}, {}});
      if (at == std::string::npos) {
        pending_.erase(0, final ? pending_.size() : end);
        return false;
      }
      pending_.erase(0, at + marker.size());
      state_ = in_section_ ? State::section : State::text;
      return true;
    }
  }
  return false;
}

// {"name": "NAME", "arguments": — then the arguments. Needs more text: false (or, final, give back).
bool ToolCallParser::header_json(std::vector<ToolCallEvent>& out, bool final) {
  const std::string_view p = pending_;
  enum class Parse { more, bad };
  auto need = [&](Parse why) {
    if (why == Parse::more && !final && p.size() <= kMaxHeaderBytes) return false;
    give_back(out);
    return true;
  };
  std::size_t at = skip_space(p, 0);
  auto literal = [&](std::string_view word) -> std::optional<Parse> {
    at = skip_space(p, at);
    const std::string_view rest = p.substr(at);
    if (rest.starts_with(word)) {
      at += word.size();
      return std::nullopt;
    }
    return word.starts_with(rest) ? Parse::more : Parse::bad;
  };
  if (auto r = literal("{")) return need(*r);
  if (auto r = literal("\"name\"")) return need(*r);
  if (auto r = literal(":")) return need(*r);
  at = skip_space(p, at);
  if (at >= p.size()) return need(Parse::more);
  if (p[at] != '"') return need(Parse::bad);
  std::size_t close = at + 1;
  while (close < p.size() && p[close] != '"') close += p[close] == '\\' ? 2 : 1;
  if (close >= p.size()) return need(Parse::more);
  const auto name = nlohmann::json::parse(p.substr(at, close + 1 - at), nullptr, false);
  if (name.is_discarded() || !name.is_string() || name.get_ref<const std::string&>().empty()) return need(Parse::bad);
  at = close + 1;
  if (auto r = literal(",")) return need(*r);
  if (auto r = literal("\"arguments\"")) return need(*r);
  if (auto r = literal(":")) return need(*r);
  at = skip_space(p, at);
  if (at >= p.size()) return need(Parse::more);  // the arguments start at their first byte, not before a space
  pending_.erase(0, at);
  raw_.clear();
  out.push_back({ToolCallEvent::Kind::call_start, calls_, {}, id_prefix_ + std::to_string(calls_), name.get<std::string>()});
  ++calls_;
  state_ = State::arguments;
  return true;
}

namespace {

// The arguments object of a GLM call body after its name: <arg_key>K</arg_key><arg_value>V</arg_value>
// pairs with only whitespace around them; nullopt when the body is not that.
std::optional<std::string> glm_arguments(std::string_view body) {
  constexpr std::string_view kKeyOpen = kGlmKeyOpen, kKeyClose = kGlmKeyClose;
  constexpr std::string_view kValueOpen = kGlmValueOpen, kValueClose = kGlmValueClose;
  std::string json = "{";
  std::vector<std::string> keys;
  std::size_t at = skip_space(body, 0);
  while (at < body.size()) {
    if (!body.substr(at).starts_with(kKeyOpen)) return std::nullopt;
    at += kKeyOpen.size();
    const std::size_t key_end = body.find(kKeyClose, at);
    if (key_end == std::string_view::npos) return std::nullopt;
    std::string_view key = body.substr(at, key_end - at);
    while (!key.empty() && is_space(key.front())) key.remove_prefix(1);
    while (!key.empty() && is_space(key.back())) key.remove_suffix(1);
    if (key.empty() || std::find(keys.begin(), keys.end(), key) != keys.end()) return std::nullopt;
    keys.emplace_back(key);
    at = skip_space(body, key_end + kKeyClose.size());
    if (!body.substr(at).starts_with(kValueOpen)) return std::nullopt;
    at += kValueOpen.size();
    const std::size_t value_end = body.find(kValueClose, at);
    if (value_end == std::string_view::npos) return std::nullopt;
    const std::string_view value = body.substr(at, value_end - at);
    const auto parsed = nlohmann::json::parse(value, nullptr, false);
    const bool as_json = !parsed.is_discarded() && !parsed.is_string();
    if (keys.size() > 1) json += ",";
    json += nlohmann::json(std::string(key)).dump() + ":" +
            (as_json ? parsed.dump() : nlohmann::json(std::string(value)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    at = skip_space(body, value_end + kValueClose.size());
  }
  return json + "}";
}

// A marked call's body may be long (a file's text in a value); past this without its close marker
// it is not a call.
constexpr std::size_t kMaxMarkedCallBytes = 1u << 20;

struct MarkedCall {
  std::string name;
  std::string arguments;  // a JSON object's text
};

// A GLM call body: the name up to the first '<', then its arguments; nullopt when it is not that.
std::optional<MarkedCall> read_glm_call(std::string_view body) {
  const std::size_t name_end = std::min(body.find('<'), body.size());
  std::string_view name = body.substr(0, name_end);
  while (!name.empty() && is_space(name.front())) name.remove_prefix(1);
  while (!name.empty() && is_space(name.back())) name.remove_suffix(1);
  auto arguments = glm_arguments(body.substr(name_end));
  if (name.empty() || name.find_first_of("\n\r") != std::string_view::npos || !arguments) return std::nullopt;
  return MarkedCall{std::string(name), std::move(*arguments)};
}

std::optional<MarkedCall> read_dsml_call(std::string_view body) {
  auto call = parse_dsml_invoke(body);
  if (!call) return std::nullopt;
  return MarkedCall{std::move(call->name), std::move(call->arguments)};
}

}  // namespace

bool ToolCallParser::call_marked(std::vector<ToolCallEvent>& out, bool final) {
  const std::size_t end = pending_.find(markup_.call.suffix);
  if (end == std::string::npos) {
    if (!final && pending_.size() <= kMaxMarkedCallBytes) return false;
    raw_ += pending_;
    pending_.clear();
    give_back(out);
    return false;
  }
  const std::string_view body = std::string_view(pending_).substr(0, end);
  auto call = markup_.style == ToolCallStyle::glm ? read_glm_call(body) : read_dsml_call(body);
  const std::size_t consumed = end + markup_.call.suffix.size();
  if (!call) {
    raw_ += pending_.substr(0, consumed);
    pending_.erase(0, consumed);
    give_back(out);
    return true;
  }
  const int index = calls_++;
  out.push_back({ToolCallEvent::Kind::call_start, index, {}, id_prefix_ + std::to_string(index), std::move(call->name)});
  out.push_back({ToolCallEvent::Kind::arguments, index, std::move(call->arguments), {}, {}});
  pending_.erase(0, consumed);
  raw_.clear();
  state_ = in_section_ ? State::section : State::text;
  return true;
}

ParsedToolCalls parse_tool_calls(const ChatToolMarkup& markup, std::string_view text, const std::string& id_prefix) {
  ToolCallParser parser(markup, id_prefix);
  std::vector<ToolCallEvent> events = parser.push(text);
  for (ToolCallEvent& e : parser.finish()) events.push_back(std::move(e));
  ParsedToolCalls out;
  for (ToolCallEvent& e : events) {
    switch (e.kind) {
      case ToolCallEvent::Kind::content: out.content += e.text; break;
      case ToolCallEvent::Kind::call_start: out.calls.push_back({std::move(e.id), std::move(e.name), {}}); break;
      case ToolCallEvent::Kind::arguments: out.calls[std::size_t(e.index)].arguments += e.text; break;
    }
  }
  return out;
}

}  // namespace waste

#include "compute/tokenizer/chat_format.hpp"

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

}  // namespace

const ChatAffixes& ChatFormat::affixes(ChatRole role) const noexcept {
  switch (role) {
    case ChatRole::system: return system;
    case ChatRole::assistant: return assistant;
    case ChatRole::user: break;
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
    if (key != "system" && key != "user" && key != "assistant" && key != "open" && key != "tool_calls") {
      return make_error(Errc::format,
                        where + ": unknown key \"" + key + "\" (expected system, user, assistant, open, tool_calls)");
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
  if (doc.contains("tool_calls")) {
    const auto& tc = doc["tool_calls"];
    if (!tc.is_object()) return make_error(Errc::format, where + ": \"tool_calls\" must be an object of strings");
    for (const auto& [name, value] : tc.items()) {
      if (!value.is_string()) {
        return make_error(Errc::format, where + ": \"tool_calls\".\"" + name + "\" must be a string");
      }
      format.tool_calls.emplace_back(name, value.get<std::string>());
      WASTE_TRY(check_length(format.tool_calls.back().second, where + ": \"tool_calls\".\"" + name + "\""));
    }
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

std::vector<int> build_chat_prompt(const Tokenizer& tokenizer, const ChatFormat& format,
                                   std::span<const ChatMessage> messages, bool open_model_turn) {
  std::vector<int> ids;
  for (const ChatMessage& message : messages) {
    const ChatAffixes& affixes = format.affixes(message.role);
    tokenizer.encode_markup(affixes.prefix, ids);
    tokenizer.encode(message.content, ids);
    tokenizer.encode_markup(affixes.suffix, ids);
  }
  if (open_model_turn) tokenizer.encode_markup(format.open_turn(), ids);
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

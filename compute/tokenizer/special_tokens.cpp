#include "compute/tokenizer/special_tokens.hpp"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

namespace waste::tokenizer {

Result<std::vector<Special>> parse_specials(std::string_view json_text, std::string_view origin) {
  const auto doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  const std::string where(origin);
  if (doc.is_discarded()) return make_error(Errc::format, where + ": not valid JSON");
  if (!doc.is_array()) return make_error(Errc::format, where + ": expected an array of {\"id\", \"text\"}");
  std::vector<Special> specials;
  std::set<int> ids;
  std::set<std::string> texts;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const auto& entry = doc[i];
    const std::string at = where + ": entry " + std::to_string(i);
    if (!entry.is_object() || !entry.contains("id") || !entry.contains("text")) {
      return make_error(Errc::format, at + ": expected {\"id\": int, \"text\": string}");
    }
    if (!entry["id"].is_number_integer() || entry["id"].get<long long>() < 0 ||
        entry["id"].get<long long>() > 0x7FFFFFFF) {
      return make_error(Errc::format, at + ": \"id\" must be a non-negative integer");
    }
    if (!entry["text"].is_string() || entry["text"].get<std::string>().empty()) {
      return make_error(Errc::format, at + ": \"text\" must be a non-empty string");
    }
    Special s{entry["id"].get<int>(), entry["text"].get<std::string>()};
    if (!ids.insert(s.id).second) return make_error(Errc::format, at + ": id " + std::to_string(s.id) + " repeats");
    if (!texts.insert(s.text).second) return make_error(Errc::format, at + ": text '" + s.text + "' repeats");
    specials.push_back(std::move(s));
  }
  return specials;
}

SpecialMatcher::SpecialMatcher(std::vector<Special> specials) : by_length_(std::move(specials)) {
  std::stable_sort(by_length_.begin(), by_length_.end(),
                   [](const Special& a, const Special& b) { return a.text.size() > b.text.size(); });
  for (const Special& s : by_length_) first_byte_[static_cast<unsigned char>(s.text[0])] = true;
}

std::optional<SpecialMatch> SpecialMatcher::find(std::string_view text, std::size_t from) const noexcept {
  for (std::size_t pos = from; pos < text.size(); ++pos) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) continue;
    const std::string_view rest = text.substr(pos);
    for (const Special& s : by_length_) {
      if (rest.starts_with(s.text)) return SpecialMatch{pos, s.text.size(), s.id};
    }
  }
  return std::nullopt;
}

}  // namespace waste::tokenizer

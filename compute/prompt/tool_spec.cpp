#include "compute/prompt/tool_spec.hpp"

#include <algorithm>

namespace waste {

bool valid_tool_name(std::string_view s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

std::string declare_tools(std::span<const ToolDef> tools) {
  using nlohmann::json;
  json declared = json::array();
  for (const ToolDef& tool : tools) {
    json entry{{"type", "function"}, {"function", {{"name", tool.name}}}};
    if (tool.description) entry["function"]["description"] = *tool.description;
    entry["function"]["parameters"] = tool.parameters;
    declared.push_back(std::move(entry));
  }
  return declared.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace waste

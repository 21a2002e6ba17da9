// What a caller declares about the answer it wants: the tools the model may call, whether and
// which call is forced, and the response format. The front ends fill it (serve from an OpenAI
// body, the C API from its structs); constraint_builder.* turns it into a ConstraintPlan and
// declare_tools() into the declaration turn's JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace waste {

// One function tool.
struct ToolDef {
  std::string name;            // [a-zA-Z0-9_-]{1,64} (valid_tool_name), unique among the tools
  nlohmann::json parameters;   // a JSON Schema object; omitted = {"type": "object", "properties": {}}
  std::optional<std::string> description;
};

enum class ToolChoice : std::uint8_t { none, automatic, required, named };
enum class ResponseFormat : std::uint8_t { text, json_object, json_schema };

// OpenAI's rule for function and schema names: 1 to 64 characters from a-z, A-Z, 0-9, _ and -
// (a name goes into the tool-name grammar unescaped).
bool valid_tool_name(std::string_view name);

// The tools array of the declaration turn, compact JSON with sorted keys:
// [{"function": {"description": ..., "name": ..., "parameters": ...}, "type": "function"}, ...].
std::string declare_tools(std::span<const ToolDef> tools);

}  // namespace waste

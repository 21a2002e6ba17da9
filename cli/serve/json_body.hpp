// A request body parsed with its nesting bounded while it is read: nlohmann parses iteratively,
// but copying, dump() and the schema compiler recurse, so a body nested deeper than the limit is
// refused before any tree that deep exists (the parse stops at the first level too many).
#pragma once

#include <expected>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cli/serve/api_error.hpp"
#include "shared/json_depth.hpp"

namespace waste::serve {

// Invalid JSON: a 400 "request body is not valid JSON: ..." (param null). Nested deeper than
// max_depth: a 400 whose param is where the nesting is (a schema's root, e.g.
// "response_format.json_schema.schema", or the path's first three steps) and whose message is
// "PARAM: nesting deeper than N (--max-json-depth)".
std::expected<nlohmann::json, ApiError> parse_json_body(std::string_view text, int max_depth);

// For values that did not come through parse_json_body (shared/json_depth.hpp).
using ::waste::nested_deeper_than;

}  // namespace waste::serve

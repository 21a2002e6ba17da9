// How deep a JSON value nests, found without recursion. nlohmann parses iteratively, but its copy,
// dump() and destructor recurse once per level, so every reader of untrusted JSON (a request body,
// a schema, a checkpoint's config.json) checks depth here before anything recursive touches it.
#pragma once

#include <nlohmann/json.hpp>

namespace waste {

// Whether `value` nests objects and arrays deeper than max_depth (a structured value counts as
// level 1, a scalar as 0). Stops at the first level past the limit.
bool nested_deeper_than(const nlohmann::json& value, int max_depth);

}  // namespace waste

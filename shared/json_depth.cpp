#include "shared/json_depth.hpp"

#include <utility>
#include <vector>

namespace waste {

bool nested_deeper_than(const nlohmann::json& value, int max_depth) {
  std::vector<std::pair<const nlohmann::json*, int>> todo{{&value, 1}};
  while (!todo.empty()) {
    const auto [v, depth] = todo.back();
    todo.pop_back();
    if (!v->is_structured()) continue;
    if (depth > max_depth) return true;
    for (const nlohmann::json& child : *v) todo.emplace_back(&child, depth + 1);
  }
  return false;
}

}  // namespace waste

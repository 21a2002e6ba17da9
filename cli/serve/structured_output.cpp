#include "cli/serve/structured_output.hpp"

#include <string>

#include "compute/prompt/constraint_builder.hpp"

namespace waste::serve {
namespace {

ApiError to_api_error(const PromptError& e) { return bad_param(e.param, e.message); }

}  // namespace

int tool_calls_in_history(const ParsedRequest& request) {
  int n = 0;
  for (const ChatMessage& m : request.messages) n += int(m.tool_calls.size());
  return n;
}

std::expected<void, ApiError> check_tools_supported(const ParsedRequest& request, const ChatFormat& format) {
  if (format.tools) return {};
  if (!request.tools.empty()) {
    return std::unexpected(bad_param("tools", "'tools': this model's chat format has no tool-call markup "
                                              "(a \"tools\" object in chat.json)"));
  }
  for (std::size_t i = 0; i < request.messages.size(); ++i) {
    if (request.messages[i].tool_calls.empty()) continue;
    const std::string p = "messages[" + std::to_string(i) + "].tool_calls";
    return std::unexpected(bad_param(p, "'" + p + "': this model's chat format has no tool-call markup "
                                                  "(a \"tools\" object in chat.json)"));
  }
  return {};
}

std::expected<std::shared_ptr<const ConstraintPlan>, ApiError> make_constraint(
    const ParsedRequest& request, const ChatFormat& format, const Tokenizer& tokenizer,
    const std::shared_ptr<const grammar::TokenIndex>& index, const RequestLimits& limits) {
  const bool tool_forced = request.tool_choice == ToolChoice::required || request.tool_choice == ToolChoice::named;
  if (request.response_format == ResponseFormat::text && !tool_forced) return nullptr;
  const std::string param = tool_forced ? "tool_choice" : "response_format";
  if (!index) {
    return std::unexpected(bad_param(param, "'" + param + "': constrained output is not available in this server "
                                                          "(the grammar engine could not index the vocabulary)"));
  }
  if (tool_forced) {
    auto check = check_tools_supported(request, format);
    if (!check) return std::unexpected(check.error());
  }
  OutputSpec spec;
  spec.response_format = request.response_format;
  spec.response_schema = &request.response_schema;
  spec.tools = request.tools;
  spec.tool_choice = request.tool_choice;
  spec.tool_choice_name = request.tool_choice_name;
  spec.calls_in_history = tool_calls_in_history(request);
  const grammar::CompileLimits compile{limits.max_json_depth, "--max-json-depth", limits.max_grammar_expansion,
                                       limits.max_grammar_time};
  auto plan = make_constraint_plan(spec, format, tokenizer, index, compile);
  if (!plan) return std::unexpected(to_api_error(plan.error()));
  return std::move(*plan);
}

}  // namespace waste::serve

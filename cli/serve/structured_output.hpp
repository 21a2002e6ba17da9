// From a chat request to its output constraint (HTTP thread, before anything is sent, so every
// refusal is a 400; compute/prompt/constraint_builder.hpp builds the plan): response_format json_object / json_schema compile to a grammar; tool_choice
// "required" or a named function to the format's call markup as forced tokens around the tool's
// parameters schema (with several tools, "required" lets a grammar choose the name first).
// tool_choice auto and none add no constraint: the output is parsed for calls afterwards.
#pragma once

#include <expected>
#include <memory>

#include "cli/serve/api_error.hpp"
#include "cli/serve/openai_request.hpp"
#include "compute/prompt/output_constraint.hpp"
#include "cli/serve/request_limits.hpp"
#include "compute/prompt/chat_format.hpp"
#include "compute/tokenizer/tokenizer.hpp"

namespace waste::serve {

// Null when the answer is unconstrained. `index` may be null (no grammar engine): a request that
// needs one then gets a 400 that says why. `format` is the chat format (tools need its markup).
// Each schema is compiled here, on the caller's thread, under `limits` (nesting, expansion,
// time): a schema past one gets a 400 naming the limit and the schema's param.
std::expected<std::shared_ptr<const ConstraintPlan>, ApiError> make_constraint(
    const ParsedRequest& request, const ChatFormat& format, const Tokenizer& tokenizer,
    const std::shared_ptr<const grammar::TokenIndex>& index, const RequestLimits& limits = request_limits());

// 400 when the request uses tools (tools, assistant tool_calls) and the format has no markup.
std::expected<void, ApiError> check_tools_supported(const ParsedRequest& request, const ChatFormat& format);

// The calls already in the conversation (Kimi ids count from there: functions.NAME:IDX).
int tool_calls_in_history(const ParsedRequest& request);

}  // namespace waste::serve

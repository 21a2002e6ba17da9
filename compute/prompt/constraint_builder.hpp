// From what a caller asks of the answer (OutputSpec) to its ConstraintPlan: a response format
// json_object / json_schema compiles to a grammar; tool_choice "required" or a named function to
// the chat format's call markup as forced tokens around the tool's parameters schema (with
// several tools, "required" lets a grammar choose the name first; GLM's and DSML's markups, which
// write each argument apart, are built by glm_call_plan.hpp and dsml_call_plan.hpp). tool_choice
// auto and none add no constraint: the output is parsed for calls afterwards
// (tool_call_parser.hpp). A grammar file's text compiles to a one-stage plan. Schemas are compiled
// on the caller's thread under `limits`, and shared through a process-wide cache keyed by their
// source, so requests with the same schema share one Grammar (and its warm token-set cache).
#pragma once

#include <cstdint>
#include <expected>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "compute/prompt/output_constraint.hpp"
#include "compute/prompt/tool_spec.hpp"
#include "compute/sampling/grammar/grammar.hpp"
#include "compute/prompt/chat_format.hpp"
#include "compute/tokenizer/tokenizer.hpp"
#include "shared/result.hpp"

namespace waste {

// A refusal that names the field of the request it is about ("tool_choice",
// "tools[1].function.parameters", ...); the front end gives it its own shape (an HTTP 400, a status).
struct PromptError {
  std::string param;
  std::string message;
};

struct OutputSpec {
  ResponseFormat response_format = ResponseFormat::text;
  // json_schema: the schema (null, or a null value = any JSON object). Pointed to, never copied:
  // a schema that did not come through a depth-bounded parser may be nested past what a
  // recursive copy survives; compile_schema() checks the depth first.
  const nlohmann::json* response_schema = nullptr;
  std::span<const ToolDef> tools;
  ToolChoice tool_choice = ToolChoice::none;
  std::string tool_choice_name;       // named: one of tools
  int calls_in_history = 0;           // calls already in the conversation (Kimi ids count from there)
};

// Null when the answer is unconstrained. A forced call needs `format.tools` (else a PromptError
// on "tool_choice"); `index` must not be null.
std::expected<std::shared_ptr<const ConstraintPlan>, PromptError> make_constraint_plan(
    const OutputSpec& spec, const ChatFormat& format, const Tokenizer& tokenizer,
    const std::shared_ptr<const grammar::TokenIndex>& index, const grammar::CompileLimits& limits);

// One schema (null = any JSON object) through the cache; refusals name `param`. A non-empty
// `suffix`: the value is followed by these literal bytes (a plain-text end marker).
std::expected<std::shared_ptr<const grammar::Grammar>, PromptError> compile_schema(
    const nlohmann::json& schema, const std::string& param, const grammar::CompileLimits& limits,
    std::string_view suffix = {});
// An EBNF grammar's text through the same cache; refusals name `param`.
std::expected<std::shared_ptr<const grammar::Grammar>, PromptError> compile_ebnf_cached(
    const std::string& ebnf, const std::string& param, const grammar::CompileLimits& limits);

// A one-stage plan over an EBNF (GBNF-like) grammar's text; refusals name `param`.
std::expected<std::shared_ptr<const ConstraintPlan>, PromptError> grammar_plan(
    std::string_view ebnf, const std::string& param, const std::shared_ptr<const grammar::TokenIndex>& index,
    const grammar::CompileLimits& limits);

// A grammar given as text (`waste run --grammar/--json-schema FILE`, the C API's
// waste_constraint): EBNF, or a JSON Schema's JSON, compiled with the default limits. Errors are
// prefixed with `name` (the file, the field).
enum class GrammarSource : std::uint8_t { ebnf, json_schema };
Result<std::shared_ptr<const grammar::Grammar>> compile_grammar_text(GrammarSource source, std::string_view text,
                                                                     const std::string& name);

}  // namespace waste

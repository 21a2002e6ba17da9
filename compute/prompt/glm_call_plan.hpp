// A forced tool call in GLM's flat markup (the glm tools style):
//   <tool_call>NAME<arg_key>K1</arg_key><arg_value>V1</arg_value>...</tool_call>
// as a ConstraintPlan. The markers and the names are forced tokens (markers in markup mode: a
// special token where the vocabulary has one, else plain text; names and keys in plain mode);
// each value is a grammar stage. The arguments are the schema's "required" keys in that array's
// order (a forced call gives no optional argument). Values are written the way
// tool_call_parser.hpp reads them back, so a forced call parses into arguments valid against
// the tool's schema:
//   - a string (type "string" with annotations only, or a schema with no keywords at all) is
//     raw text that the parser cannot read as another JSON value (not a number, true, false,
//     null, and no leading whitespace, '{' or '['), holding no </arg_value> and no call close;
//   - an "enum" / "const": one of its values (strings raw, others as JSON);
//   - a typed non-string value (integer, number, boolean, null, object, array, or a list of
//     those): JSON under the property's schema.
// A value ends with </arg_value>: as a special token, the stage's close token (allowed where the
// value is complete, forced once nothing else may follow); as plain text, the end of the grammar.
// "required" with several tools forces <tool_call>, a grammar chooses the name (the names must
// not begin one another: nothing after a name but a special token could end it), and the chosen
// tool's stages follow. What cannot be forced faithfully is refused with the field named.
#pragma once

#include <expected>
#include <memory>
#include <string>
#include <vector>

#include "compute/prompt/chat_format.hpp"
#include "compute/prompt/constraint_builder.hpp"
#include "compute/prompt/output_constraint.hpp"
#include "compute/prompt/tool_spec.hpp"
#include "compute/tokenizer/tokenizer.hpp"

namespace waste {

// `chosen`: indices into spec.tools of the tools the call may name (one for a named call).
std::expected<std::shared_ptr<const ConstraintPlan>, PromptError> glm_call_plan(
    const OutputSpec& spec, const std::vector<std::size_t>& chosen, const ChatToolMarkup& markup,
    const Tokenizer& tokenizer, const std::shared_ptr<const grammar::TokenIndex>& index,
    const grammar::CompileLimits& limits);

// The EBNF of a raw string value as described above, ending before `end` (appended as literal
// bytes when not empty). `forbidden`: texts the value may not hold (each starting with '<' and
// holding no other '<'). Exposed for its tests.
std::string glm_raw_string_ebnf(const std::vector<std::string>& forbidden, const std::string& end);

}  // namespace waste

// A forced tool call in DeepSeek-V4.1's DSML markup (the dsml tools style), as a ConstraintPlan:
//   \n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="NAME">\n
//   <｜DSML｜ parameter name="K1" string="true|false">V1</｜DSML｜ parameter>\n ... \n
//   </｜DSML｜ invoke>\n</｜DSML｜ calls>
// exactly as dsml_invoke() renders a call. Markers are forced in markup mode (special tokens where
// the vocabulary has them, else plain text), names and keys in plain mode; each value is a
// grammar stage. The arguments are the schema's "required" keys in that array's order (a forced
// call gives no optional argument). Each value is written the way parse_dsml_invoke() reads it
// back, following the markup's own rule (strings as they are, string="true"; everything else as
// JSON, string="false"), so a forced call parses into arguments valid against the tool's schema:
//   - a string parameter (type "string" with annotations only, a schema with no keywords but
//     annotations, a property the schema does not describe, or an "enum" / "const" of strings
//     only): string="true", raw text holding neither </｜DSML｜ parameter> nor the invoke's close
//     marker (an enum: one of its strings);
//   - any other schema (integer, number, boolean, null, object, array, type lists, a string with
//     keywords raw text cannot enforce such as "maxLength" or "pattern", enums of mixed values):
//     string="false", JSON under the property's schema.
// A value ends with </｜DSML｜ parameter>: as a special token, the stage's close token (allowed where
// the value is complete, forced once nothing else may follow); as plain text, the grammar's end.
// "required" with several tools forces the markup through `name="`, a grammar chooses the name
// with its closing quote (so names may begin one another), and the chosen tool's stages follow.
// What cannot be forced faithfully is refused with the field named.
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
std::expected<std::shared_ptr<const ConstraintPlan>, PromptError> dsml_call_plan(
    const OutputSpec& spec, const std::vector<std::size_t>& chosen, const ChatToolMarkup& markup,
    const Tokenizer& tokenizer, const std::shared_ptr<const grammar::TokenIndex>& index,
    const grammar::CompileLimits& limits);

// The EBNF of a raw text value: any text (UTF-8, any characters) holding none of `forbidden`
// (non-empty UTF-8 texts), then `end` as literal bytes when not empty. Exposed for its tests.
std::string dsml_raw_text_ebnf(const std::vector<std::string>& forbidden, const std::string& end);

}  // namespace waste

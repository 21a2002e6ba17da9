// Generation under a grammar, one sequence (`waste run --grammar/--json-schema`, the C API's
// waste_generate_constrained): eval, mask, sample, accept, feed. End tokens (eos, the chat stop
// ids) are allowed only once the match is complete and end the run without being reported or
// fed; the run also ends when the match is finished. generate_with_plan: one sequence under a
// ConstraintPlan, step for step as `waste serve`'s scheduler runs a constrained request (forced
// tokens, grammar stages, a stop id ending a stage), for the C API's forced tool call.
#pragma once

#include <functional>
#include <memory>
#include <span>

#include "compute/api/engine.hpp"
#include "compute/prompt/output_constraint.hpp"
#include "compute/sampling/grammar/grammar.hpp"
#include "compute/tokenizer/tokenizer.hpp"
#include "shared/result.hpp"

namespace waste {

// What a constrained run adds to the report.
struct GrammarReport {
  bool complete = false;         // the output is a complete match
  double mask_seconds = 0;       // all mask_logits calls
  double first_mask_seconds = 0; // the first one (cold token-set cache)
  int masks = 0;
};

// Called with each generated token that is not an end token, before it is fed; false stops the
// run (StopReason::cancelled).
using GrammarTokenFn = std::function<bool(int token)>;

// `params.stop_tokens` and `eos` (-1: none) are the end tokens; params.prompt_embeddings are fed
// with the prompt. `report` is filled as the run goes (also when it fails part-way).
Result<GenerateResult> generate_with_grammar(Engine& engine, std::span<const int> prompt, const GenerateParams& params,
                                             const Tokenizer& tokenizer, const std::shared_ptr<const grammar::Grammar>& g,
                                             int eos, const GrammarTokenFn& on_token, GrammarReport& report);

// `plan` must not be null; `stop_ids` end a grammar stage where it accepts (the chat stop ids).
// Every chosen token is reported (forced ones too) before it is fed; the run ends when the plan
// is done (StopReason::stop_token), at a stop id that ends it (neither reported nor fed), at
// params.max_tokens or a full context. A step the plan allows no token for is an error.
Result<GenerateResult> generate_with_plan(Engine& engine, std::span<const int> prompt, const GenerateParams& params,
                                          const Tokenizer& tokenizer, std::shared_ptr<const ConstraintPlan> plan,
                                          std::span<const int> stop_ids, const GrammarTokenFn& on_token);

}  // namespace waste

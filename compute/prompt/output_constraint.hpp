// What a constrained answer must look like, and one sequence's progress through it (engine
// thread). A plan is a chain of stages: forced tokens (emitted as they are, nothing sampled:
// the tool-call markup), or a grammar the sampled tokens must follow until it is finished (a
// response_format schema, a tool's parameters). A grammar stage may be a choice: the text it
// matched picks the plan that continues (which tool a "required" call names). Plans are
// immutable and shared; the per-sequence state holds the grammar::Matcher. A grammar stage ends
// when its matcher is finished, or accepting right after a token ending in '}', ']' or '"' (a
// complete JSON value: trailing whitespace the grammar may allow is not waited for).
// A grammar stage may instead end with a closing special token (`close`: GLM's </arg_value> after a
// value whose end no grammar can see, a bare number or a raw string): the token is allowed where
// the grammar accepts, taken as the stage's last token, and forced once the grammar is finished
// or a stop id was sampled where it accepts; such a stage never ends early at a bracket.
// The mask is applied to the sequence's own copy of its logits, so batching cannot change it.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compute/sampling/grammar/grammar.hpp"
#include "shared/result.hpp"

namespace waste {

struct ConstraintPlan;

struct ConstraintStage {
  std::vector<int> forced;                          // non-empty: these tokens, in order
  std::shared_ptr<const grammar::Grammar> grammar;  // else: sample under this grammar until finished
  int close = -1;  // >= 0: the grammar stage ends with this (special) token instead
  // A choice: when the grammar is finished, the plan whose text equals what it matched goes on.
  std::vector<std::pair<std::string, std::shared_ptr<const ConstraintPlan>>> branches;
};

struct ConstraintPlan {
  std::vector<ConstraintStage> stages;
  std::shared_ptr<const grammar::TokenIndex> index;  // every grammar stage's tokens
};

class ConstraintState {
 public:
  explicit ConstraintState(std::shared_ptr<const ConstraintPlan> plan);

  // The next token when it is forced, else -1: then mask() and sample.
  [[nodiscard]] int forced() const;
  // The plan is complete: nothing may follow (the request ends with finish "stop").
  [[nodiscard]] bool done() const;
  // -inf for every token the grammar stage does not allow (stop ids only where it accepts).
  void mask(std::span<float> logits);
  // The chosen token (forced, or sampled and not a stop id) and its bytes. Error when the token
  // does not fit (a mask/sampler disagreement: a bug, reported instead of a broken answer).
  Status accept(int token, std::string_view bytes);
  // A stop id was sampled where the grammar accepts: the stage ends there. True when the whole
  // plan may end here; false when more stages follow (the stop id is then dropped).
  bool accept_stop();

 private:
  void enter_stage();
  void advance();  // the current stage is complete

  std::shared_ptr<const ConstraintPlan> plan_;
  std::size_t stage_ = 0;
  std::size_t forced_at_ = 0;  // next forced token of a forced stage
  std::optional<grammar::Matcher> matcher_;
  std::string matched_;        // a choice stage's bytes so far
  bool closing_ = false;       // the stage's close token is forced next
};

class Sampler;

// The next token under `state`: forced, or sampled from `logits` masked into `masked` (the
// sequence's own buffer). A stop id sampled where a grammar stage accepts ends that stage; when
// more stages follow it is dropped and the next one decides, from the same logits (at most one
// retry per stage). kNoTokenAllowed: the constraint allows no token here; kStoppedByStop: a stop
// id ended the plan.
inline constexpr int kNoTokenAllowed = -1;
inline constexpr int kStoppedByStop = -2;
int choose_constrained(ConstraintState& state, Sampler& sampler, std::span<const float> logits,
                       std::vector<float>& masked, std::span<const int> stop_ids);

}  // namespace waste

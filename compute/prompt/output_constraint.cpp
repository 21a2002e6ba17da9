#include "compute/prompt/output_constraint.hpp"

#include <algorithm>
#include <cmath>

#include "compute/sampling/sampler.hpp"

namespace waste {

ConstraintState::ConstraintState(std::shared_ptr<const ConstraintPlan> plan) : plan_(std::move(plan)) { enter_stage(); }

void ConstraintState::enter_stage() {
  forced_at_ = 0;
  closing_ = false;
  matched_.clear();
  matcher_.reset();
  if (done()) return;
  const ConstraintStage& stage = plan_->stages[stage_];
  if (stage.forced.empty()) matcher_.emplace(stage.grammar, plan_->index);
}

int ConstraintState::forced() const {
  if (done()) return -1;
  const ConstraintStage& stage = plan_->stages[stage_];
  if (closing_) return stage.close;
  return stage.forced.empty() ? -1 : stage.forced[forced_at_];
}

bool ConstraintState::done() const { return stage_ >= plan_->stages.size(); }

void ConstraintState::mask(std::span<float> logits) {
  if (!matcher_) return;
  const int close = plan_->stages[stage_].close;
  const bool can_close = close >= 0 && std::size_t(close) < logits.size() && matcher_->accepting();
  const float kept = can_close ? logits[std::size_t(close)] : 0.0f;
  matcher_->mask_logits(logits);
  if (can_close) logits[std::size_t(close)] = kept;  // a special: the matcher masks it
}

void ConstraintState::advance() {
  std::shared_ptr<const ConstraintPlan> next;
  for (const auto& [text, plan] : plan_->stages[stage_].branches) {
    if (text == matched_) next = plan;
  }
  if (next) {
    plan_ = std::move(next);  // may free the old plan: nothing of it is used after this
    stage_ = 0;
  } else {
    ++stage_;
  }
  enter_stage();
}

Status ConstraintState::accept(int token, std::string_view bytes) {
  if (done()) return make_error(Errc::argument, "token " + std::to_string(token) + " after the constrained output ended");
  const ConstraintStage& stage = plan_->stages[stage_];
  if (stage.close >= 0 && token == stage.close && (closing_ || matcher_->accepting())) {
    advance();
    return ok();
  }
  if (closing_) {
    return make_error(Errc::argument, "token " + std::to_string(token) + " where " + std::to_string(stage.close) +
                                          " is forced");
  }
  if (!stage.forced.empty()) {
    if (token != stage.forced[forced_at_]) {
      return make_error(Errc::argument, "token " + std::to_string(token) + " where " +
                                            std::to_string(stage.forced[forced_at_]) + " is forced");
    }
    if (++forced_at_ == stage.forced.size()) advance();
    return ok();
  }
  WASTE_TRY(matcher_->accept_token(token));
  if (!stage.branches.empty()) matched_ += bytes;
  // A JSON value is complete at the bracket or quote that makes the match accepting, even where
  // the grammar would allow whitespace after it (which a sampler could extend without end).
  if (stage.close >= 0) {
    closing_ = matcher_->finished();
    return ok();
  }
  const bool closed = !bytes.empty() && (bytes.back() == '}' || bytes.back() == ']' || bytes.back() == '"');
  if (matcher_->finished() || (closed && matcher_->accepting())) advance();
  return ok();
}

bool ConstraintState::accept_stop() {
  if (done() || !plan_->stages[stage_].forced.empty()) return done();
  if (plan_->stages[stage_].close >= 0) {
    closing_ = true;  // the stop id is dropped: the value ends with its close token
    return false;
  }
  advance();
  return done();
}

int choose_constrained(ConstraintState& c, Sampler& sampler, std::span<const float> logits, std::vector<float>& masked,
                       std::span<const int> stop_ids) {
  const auto is_stop = [&](int token) { return std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end(); };
  for (;;) {
    if (const int forced = c.forced(); forced >= 0) return forced;
    masked.assign(logits.begin(), logits.end());
    c.mask(masked);
    if (std::none_of(masked.begin(), masked.end(), [](float l) { return l > -INFINITY; })) return kNoTokenAllowed;
    const int token = sampler.sample(masked);
    if (!is_stop(token)) return token;
    if (c.accept_stop()) return kStoppedByStop;
  }
}

}  // namespace waste

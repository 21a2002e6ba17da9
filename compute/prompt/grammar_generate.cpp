#include "compute/prompt/grammar_generate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "compute/sampling/sampler.hpp"

namespace waste {

Result<GenerateResult> generate_with_grammar(Engine& engine, std::span<const int> prompt, const GenerateParams& params,
                                             const Tokenizer& tokenizer, const std::shared_ptr<const grammar::Grammar>& g,
                                             int eos, const GrammarTokenFn& on_token, GrammarReport& gr) {
  std::vector<int> ends = params.stop_tokens;
  if (eos >= 0) ends.push_back(eos);
  std::vector<std::string> bytes(std::size_t(tokenizer.vocab()));
  std::vector<int> specials;
  for (int id = 0; id < tokenizer.vocab(); ++id) {
    if (!tokenizer.valid_id(id)) continue;
    if (tokenizer.is_special(id)) {
      specials.push_back(id);
    } else {
      bytes[std::size_t(id)] = tokenizer.decode_token(id);
    }
  }
  std::vector<int> eos_ids;
  for (int id : ends) {
    if (id >= 0 && id < tokenizer.vocab()) eos_ids.push_back(id);
  }
  auto index = grammar::build_token_index(std::move(bytes), std::move(specials), std::move(eos_ids));
  if (!index) return std::unexpected(index.error());
  grammar::Matcher matcher(g, *index);

  GenerateResult result;
  result.prompt_tokens = int(prompt.size());
  auto start = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  auto fed = engine.eval(prompt, params.prompt_embeddings);
  if (!fed) return std::unexpected(fed.error());
  result.prompt_seconds = since(start);
  start = std::chrono::steady_clock::now();
  std::vector<float> logits(fed->begin(), fed->end());
  Sampler sampler(params.sampling);
  const int ctx = engine.info().ctx_tokens;
  for (int step = 0; step < params.max_tokens; ++step) {
    if (matcher.finished()) {
      result.stop = StopReason::stop_token;
      break;
    }
    const auto mask_start = std::chrono::steady_clock::now();
    matcher.mask_logits(logits);
    const double dt = since(mask_start);
    gr.mask_seconds += dt;
    if (gr.masks++ == 0) gr.first_mask_seconds = dt;
    if (std::none_of(logits.begin(), logits.end(), [](float l) { return std::isfinite(l); })) {
      return make_error(Errc::argument, "grammar: no token of the vocabulary can continue the output here (after " +
                                            std::to_string(step) + " tokens)");
    }
    const int next = sampler.sample(logits);
    if (Status ok = matcher.accept_token(next); !ok) return std::unexpected(ok.error());
    result.tokens.push_back(next);
    if (std::find(ends.begin(), ends.end(), next) != ends.end()) {
      result.stop = next == eos ? StopReason::eos : StopReason::stop_token;
      break;
    }
    if (!on_token(next)) {
      result.stop = StopReason::cancelled;
      break;
    }
    if (engine.position() >= ctx) {
      result.stop = StopReason::context_full;
      break;
    }
    const int one[1] = {next};
    auto step_logits = engine.eval(one);
    if (!step_logits) return std::unexpected(step_logits.error().with_context("generated token " + std::to_string(step)));
    logits.assign(step_logits->begin(), step_logits->end());
  }
  result.generate_seconds = since(start);
  gr.complete = matcher.accepting();
  return result;
}

Result<GenerateResult> generate_with_plan(Engine& engine, std::span<const int> prompt, const GenerateParams& params,
                                          const Tokenizer& tokenizer, std::shared_ptr<const ConstraintPlan> plan,
                                          std::span<const int> stop_ids, const GrammarTokenFn& on_token) {
  ConstraintState state(std::move(plan));
  GenerateResult result;
  result.prompt_tokens = int(prompt.size());
  auto start = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  auto fed = engine.eval(prompt, params.prompt_embeddings);
  if (!fed) return std::unexpected(fed.error());
  result.prompt_seconds = since(start);
  start = std::chrono::steady_clock::now();
  std::vector<float> logits(fed->begin(), fed->end());
  std::vector<float> masked;
  Sampler sampler(params.sampling);
  const int ctx = engine.info().ctx_tokens;
  result.stop = StopReason::max_tokens;
  for (int step = 0; step < params.max_tokens; ++step) {
    const int token = choose_constrained(state, sampler, logits, masked, stop_ids);
    if (token == kNoTokenAllowed) {
      return make_error(Errc::argument, "the output constraint allows no token here (after " + std::to_string(step) +
                                            " tokens)");
    }
    if (token == kStoppedByStop) {
      result.stop = StopReason::stop_token;
      break;
    }
    if (Status accepted = state.accept(token, tokenizer.decode_token(token)); !accepted) {
      return std::unexpected(accepted.error().with_context("output constraint"));
    }
    result.tokens.push_back(token);
    if (!on_token(token)) {
      result.stop = StopReason::cancelled;
      break;
    }
    if (state.done()) {
      result.stop = StopReason::stop_token;
      break;
    }
    if (engine.position() >= ctx) {
      result.stop = StopReason::context_full;
      break;
    }
    const int one[1] = {token};
    auto step_logits = engine.eval(one);
    if (!step_logits) return std::unexpected(step_logits.error().with_context("generated token " + std::to_string(step)));
    logits.assign(step_logits->begin(), step_logits->end());
  }
  result.generate_seconds = since(start);
  return result;
}

}  // namespace waste

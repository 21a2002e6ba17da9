#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "compute/sampling/grammar/automaton.hpp"
#include "compute/sampling/grammar/grammar.hpp"
#include "compute/sampling/grammar/mask_cache.hpp"
#include "compute/sampling/grammar/token_index.hpp"

namespace waste::grammar {
namespace {

// Token bytes in an error message: JSON-quoted, invalid UTF-8 replaced.
std::string nlohmann_quote(std::string_view bytes) {
  return nlohmann::json(std::string(bytes)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::unexpected<Error> overflow_error(const std::string& what) {
  return make_error(Errc::unsupported, "grammar: after " + what + " the parse went past its bounds (" +
                                           std::to_string(Grammar::kMaxStacks) + " stacks or " +
                                           std::to_string(Grammar::kMaxStepWork) + " expansion steps per byte)");
}

}  // namespace

struct Matcher::State {
  StackSet stacks;
  bool ended = false;                // EOS accepted
  std::vector<std::uint64_t> words;  // mask_logits scratch
};

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenIndex> index)
    : grammar_(std::move(grammar)), index_(std::move(index)), state_(std::make_unique<State>()) {
  cache_ = grammar_->cache_for(index_);
  state_->stacks = grammar_->initial();
}
Matcher::Matcher(const Matcher& o)
    : grammar_(o.grammar_), index_(o.index_), cache_(o.cache_), state_(std::make_unique<State>(*o.state_)) {}
Matcher& Matcher::operator=(const Matcher& o) {
  if (this != &o) *this = Matcher(o);
  return *this;
}
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;
Matcher::~Matcher() = default;

void Matcher::fill_allowed(std::span<std::uint64_t> words) {
  std::fill(words.begin(), words.end(), 0);
  if (state_->ended) return;
  auto set = [&](std::int32_t id) { words[std::size_t(id) >> 6] |= std::uint64_t(1) << (id & 63); };
  auto test = [&](std::int32_t id) { return (words[std::size_t(id) >> 6] >> (id & 63)) & 1u; };
  for (const Stack& s : state_->stacks) {
    if (s.empty()) {
      for (std::int32_t id : index_->eos_ids()) set(id);
      continue;
    }
    const TokenSet& ts = cache_->lookup(s);
    if (!ts.accepted_bits.empty()) {
      for (std::size_t w = 0; w < words.size(); ++w) words[w] |= ts.accepted_bits[w];
    } else {
      for (std::int32_t id : ts.accepted_ids) set(id);
    }
    for (std::int32_t id : ts.uncertain) {
      if (test(id)) continue;
      StackSet one{s};
      if (grammar_->advance(one, index_->bytes(id))) set(id);
    }
  }
}

void Matcher::mask_logits(std::span<float> logits) {
  const std::size_t n = std::min(logits.size(), std::size_t(index_->vocab()));
  state_->words.resize((std::size_t(index_->vocab()) + 63) / 64);
  fill_allowed(state_->words);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (std::size_t w = 0; w * 64 < n; ++w) {
    const std::uint64_t bits = state_->words[w];
    if (bits == ~std::uint64_t(0)) continue;
    const std::size_t end = std::min(n, w * 64 + 64);
    for (std::size_t t = w * 64; t < end; ++t) {
      if (!((bits >> (t & 63)) & 1u)) logits[t] = kNegInf;
    }
  }
  // Ids beyond the index (a logits row wider than the vocabulary) are never allowed.
  for (std::size_t t = n; t < logits.size(); ++t) logits[t] = kNegInf;
}

bool Matcher::allows_bytes(std::string_view bytes) const {
  if (state_->ended) return bytes.empty();
  StackSet s = state_->stacks;
  return grammar_->advance(s, bytes);
}

bool Matcher::allows_token(int token) const {
  if (token < 0 || token >= index_->vocab() || state_->ended) return false;
  switch (index_->kind(token)) {
    case TokenIndex::Kind::never: return false;
    case TokenIndex::Kind::eos: return accepting();
    case TokenIndex::Kind::ordinary: return allows_bytes(index_->bytes(token));
  }
  return false;
}

Status Matcher::accept_token(int token) {
  if (token < 0 || token >= index_->vocab()) {
    return make_error(Errc::argument, "grammar: token " + std::to_string(token) + " is outside the vocabulary of " +
                                          std::to_string(index_->vocab()));
  }
  if (state_->ended) return make_error(Errc::argument, "grammar: token " + std::to_string(token) + " after the end of the match");
  switch (index_->kind(token)) {
    case TokenIndex::Kind::never:
      return make_error(Errc::argument, "grammar: token " + std::to_string(token) + " (a special or empty token) is never allowed");
    case TokenIndex::Kind::eos:
      if (!accepting()) {
        return make_error(Errc::argument, "grammar: eos token " + std::to_string(token) + " before the match is complete");
      }
      state_->ended = true;
      return ok();
    case TokenIndex::Kind::ordinary:
      break;
  }
  StackSet s = state_->stacks;
  bool overflow = false;
  if (!grammar_->advance(s, index_->bytes(token), &overflow)) {
    if (overflow) return overflow_error("token " + std::to_string(token));
    return make_error(Errc::argument, "grammar: token " + std::to_string(token) + " (" +
                                          nlohmann_quote(index_->bytes(token)) + ") is not allowed here");
  }
  state_->stacks = std::move(s);
  return ok();
}

Status Matcher::accept_bytes(std::string_view bytes) {
  if (state_->ended && !bytes.empty()) return make_error(Errc::argument, "grammar: text after the end of the match");
  StackSet s = state_->stacks;
  bool overflow = false;
  if (!grammar_->advance(s, bytes, &overflow)) {
    if (overflow) return overflow_error("the text " + nlohmann_quote(bytes));
    return make_error(Errc::argument, "grammar: the text " + nlohmann_quote(bytes) + " is not allowed here");
  }
  state_->stacks = std::move(s);
  return ok();
}

bool Matcher::accepting() const { return state_->ended || Grammar::has_empty(state_->stacks); }
bool Matcher::finished() const { return state_->ended || (Grammar::has_empty(state_->stacks) && !Grammar::has_live(state_->stacks)); }

}  // namespace waste::grammar

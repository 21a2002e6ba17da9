// Placeholder until the real compiler lands: every entry point says "not implemented yet".
#include <limits>

#include <nlohmann/json.hpp>

#include "compute/sampling/grammar/grammar.hpp"

namespace waste::grammar {

class Grammar {};
class TokenIndex {};
class MaskCache {};
struct Matcher::State {};

Result<std::shared_ptr<const Grammar>> compile_json_schema(const nlohmann::json&) {
  return make_error(Errc::unsupported, "grammar: not implemented yet");
}
Result<std::shared_ptr<const Grammar>> compile_any_json_object() {
  return make_error(Errc::unsupported, "grammar: not implemented yet");
}
Result<std::shared_ptr<const Grammar>> compile_ebnf(std::string_view) {
  return make_error(Errc::unsupported, "grammar: not implemented yet");
}
Result<std::shared_ptr<const TokenIndex>> build_token_index(std::vector<std::string>, std::vector<int>,
                                                            std::vector<int>) {
  return make_error(Errc::unsupported, "grammar: not implemented yet");
}
Result<std::shared_ptr<const TokenIndex>> build_token_index(const Tokenizer&, std::span<const int>) {
  return make_error(Errc::unsupported, "grammar: not implemented yet");
}

Matcher::Matcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenIndex> i)
    : grammar_(std::move(g)), index_(std::move(i)), state_(std::make_unique<State>()) {}
Matcher::Matcher(const Matcher& o)
    : grammar_(o.grammar_), index_(o.index_), cache_(o.cache_), state_(std::make_unique<State>(*o.state_)) {}
Matcher& Matcher::operator=(const Matcher& o) {
  if (this != &o) *this = Matcher(o);
  return *this;
}
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;
Matcher::~Matcher() = default;

void Matcher::mask_logits(std::span<float> logits) {
  for (float& l : logits) l = -std::numeric_limits<float>::infinity();
}
void Matcher::fill_allowed(std::span<std::uint64_t> words) {
  for (auto& w : words) w = 0;
}
Status Matcher::accept_token(int) { return make_error(Errc::unsupported, "grammar: not implemented yet"); }
Status Matcher::accept_bytes(std::string_view) {
  return make_error(Errc::unsupported, "grammar: not implemented yet");
}
bool Matcher::allows_token(int) const { return false; }
bool Matcher::allows_bytes(std::string_view) const { return false; }
bool Matcher::accepting() const { return false; }
bool Matcher::finished() const { return false; }

}  // namespace waste::grammar

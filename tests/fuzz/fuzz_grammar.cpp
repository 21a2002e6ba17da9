// libFuzzer: the grammar compilers on request input (`response_format` schemas and tool
// parameters reach compile_json_schema from any HTTP client; --grammar files reach compile_ebnf),
// then a Matcher walking sample bytes. Input: byte 0 picks the compiler (even = JSON Schema,
// odd = EBNF); the rest up to the first NUL is the grammar, what follows is fed to the matcher.
// Checked: an error always carries a message; mask and accept agree on every token.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/sampling/grammar/grammar.hpp"

namespace {

// Every single byte plus a few multi-byte tokens, one special and one EOS: enough for the
// mask to mix prefix walks of different lengths.
const std::shared_ptr<const waste::grammar::TokenIndex>& index() {
  static const auto built = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
    for (const char* t : {"{\"", "\":", "\",", "true", "false", "null", "  ", "\n", "[]", "12"}) tokens.emplace_back(t);
    tokens.emplace_back("<special>");
    tokens.emplace_back("");  // EOS
    const int special = int(tokens.size()) - 2, eos = int(tokens.size()) - 1;
    auto idx = waste::grammar::build_token_index(std::move(tokens), {special}, {eos});
    if (!idx) __builtin_trap();
    return *idx;
  }();
  return built;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const bool ebnf = (data[0] & 1) != 0;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::size_t nul = rest.find('\0');
  const std::string_view text = rest.substr(0, nul);
  const std::string_view sample = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);

  waste::Result<std::shared_ptr<const waste::grammar::Grammar>> g;
  if (ebnf) {
    g = waste::grammar::compile_ebnf(text);
  } else {
    // Invalid JSON never reaches the compiler (the request parser refuses it first).
    const nlohmann::json schema = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) return 0;
    g = waste::grammar::compile_json_schema(schema);
  }
  if (!g) {
    if (g.error().message.empty()) __builtin_trap();
    return 0;
  }
  waste::grammar::Matcher m(*g, index());
  const std::size_t vocab = 256 + 10 + 2;
  std::vector<float> logits(vocab);
  // At most 64 steps: each picks a sample byte's token if allowed, and checks the mask agrees.
  for (std::size_t step = 0; step < sample.size() && step < 64 && !m.finished(); ++step) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    m.mask_logits(logits);
    const int token = static_cast<unsigned char>(sample[step]);
    const bool allowed = logits[std::size_t(token)] != -std::numeric_limits<float>::infinity();
    if (allowed != m.allows_token(token)) __builtin_trap();
    const auto accepted = m.accept_token(token);
    if (accepted.has_value() != allowed) __builtin_trap();
    if (!accepted && accepted.error().message.empty()) __builtin_trap();
  }
  (void)m.accepting();
  return 0;
}

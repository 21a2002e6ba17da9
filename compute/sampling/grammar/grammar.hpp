// Grammar-constrained decoding: JSON Schema or a GBNF-like EBNF file, compiled to one byte-level
// pushdown automaton, enforced by masking the logits of every token that cannot continue a valid
// prefix. Design and the supported subset: docs/design/grammar.md.
//
//   compile_json_schema(schema)  JSON Schema (a subset of draft 2020-12) -> Grammar; a keyword we
//                                do not enforce is refused with an error naming it (never ignored).
//   compile_json_schema_then()   the same, followed by literal bytes (a value ended by a marker).
//   compile_any_json_object()    any JSON object (OpenAI response_format {type: json_object}).
//   compile_ebnf(text)           a GBNF-like grammar file (start rule `root`); errors carry line:col.
//   build_token_index(...)       every token's bytes, sorted, plus the special and EOS ids; built once
//                                per tokenizer and shared by every Matcher.
//   Matcher(grammar, index)      one sequence's position in the grammar: mask_logits() before
//                                sampling, accept_token() after; copyable (a server forks it).
// Grammar and TokenIndex are immutable and thread-safe to share; a Matcher is not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/result.hpp"

namespace waste {
class Tokenizer;
}

namespace waste::grammar {

class Grammar;     // the compiled automaton (automaton.hpp); opaque here
class TokenIndex;  // token bytes in sorted order (token_index.hpp)
class MaskCache;   // per (Grammar, TokenIndex) precomputed token sets (mask_cache.hpp)

// What compiling one grammar may cost; past a limit compilation stops with an error naming it
// (Errc::unsupported). The compile itself never recurses deeper than max_depth schema levels.
struct CompileLimits {
  int max_depth = 64;                // schema nesting: sub-schemas inside sub-schemas, $ref hops included
  std::string depth_option;          // named in the depth refusal, e.g. "--max-json-depth" (may be empty)
  std::uint64_t max_expansion = std::uint64_t(1) << 16;  // derivations one byte's expansion may walk
  std::chrono::milliseconds max_time{10000};             // wall clock for the whole compile
};

Result<std::shared_ptr<const Grammar>> compile_json_schema(const nlohmann::json& schema, const CompileLimits& limits = {});
// The schema's value followed by the literal bytes `suffix` (a value ended by a plain-text
// marker, e.g. GLM's </arg_value> where it is no special token).
Result<std::shared_ptr<const Grammar>> compile_json_schema_then(const nlohmann::json& schema, std::string_view suffix,
                                                                const CompileLimits& limits = {});
Result<std::shared_ptr<const Grammar>> compile_any_json_object();
Result<std::shared_ptr<const Grammar>> compile_ebnf(std::string_view text, const CompileLimits& limits = {});

// tokens[id] = the bytes of token id (empty = never allowed, e.g. a gap in the vocabulary);
// special ids are never allowed; eos ids are allowed exactly when the matcher is accepting.
Result<std::shared_ptr<const TokenIndex>> build_token_index(std::vector<std::string> tokens,
                                                            std::vector<int> special_ids,
                                                            std::vector<int> eos_ids);
// The tokenizer's vocabulary: specials are special, its eos() (plus extra_eos) end a match.
Result<std::shared_ptr<const TokenIndex>> build_token_index(const Tokenizer& tok,
                                                            std::span<const int> extra_eos = {});

class Matcher {
 public:
  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenIndex> index);
  Matcher(const Matcher&);
  Matcher& operator=(const Matcher&);
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;
  ~Matcher();

  // logits.size() must be the index's vocabulary size. Sets logits[t] = -inf for every token t
  // whose bytes cannot continue a valid prefix, every special, and EOS unless accepting().
  void mask_logits(std::span<float> logits);
  // Same decision as a bitset: bit t of words[t / 64] set = allowed. words.size() = (vocab+63)/64.
  void fill_allowed(std::span<std::uint64_t> words);
  // Advances by the token's bytes (EOS: only when accepting; ends the match). Error (Errc::argument)
  // when the token is not allowed here; the state is then unchanged.
  Status accept_token(int token);
  // Advances by forced text (e.g. a tool-call prefix). Error when the bytes leave the grammar.
  Status accept_bytes(std::string_view bytes);
  // Whether token / bytes would be accepted, without advancing.
  [[nodiscard]] bool allows_token(int token) const;
  [[nodiscard]] bool allows_bytes(std::string_view bytes) const;

  [[nodiscard]] bool accepting() const;  // the bytes so far form a complete match
  [[nodiscard]] bool finished() const;   // accepting and no further byte can follow (or EOS taken)

  struct State;  // matcher.cpp

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenIndex> index_;
  std::shared_ptr<MaskCache> cache_;  // shared by copies and by every Matcher of this pair
  std::unique_ptr<State> state_;
};

}  // namespace waste::grammar

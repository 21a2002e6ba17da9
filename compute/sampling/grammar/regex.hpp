// The regex subset accepted in JSON Schema "pattern" (docs/design/grammar.md): literals, '.',
// classes [..] [^..] with ranges, \d \w \s \D \W \S, escapes, groups ( ) (?: ), '|',
// quantifiers * + ? {n} {n,} {n,m} (a lazy '?' suffix is accepted: it does not change what
// matches), '^' only first and '$' only last. Search semantics: an unanchored side gets '.*'.
#pragma once

#include <string_view>

#include "compute/sampling/grammar/charclass.hpp"
#include "compute/sampling/grammar/expr.hpp"

namespace waste::grammar {

// `allowed`: the characters the expression may produce (every class is intersected with it;
// JSON strings leave out '"', '\' and controls so the text needs no escapes).
Result<Expr> compile_regex(std::string_view pattern, const CharClass& allowed);

}  // namespace waste::grammar

// Strict UTF-8 decoding, as Rust's str (and so tiktoken) defines validity: no overlong forms,
// no surrogates, nothing above U+10FFFF.
#pragma once

#include <cstddef>
#include <string_view>

namespace waste::tokenizer {

// Length in bytes of the well-formed UTF-8 sequence at the start of `text`, storing its code
// point in `code_point`; 0 if the first byte does not start a well-formed sequence (or text is empty).
std::size_t decode_utf8(std::string_view text, char32_t& code_point) noexcept;

// Length of the longest prefix of `text` that is well-formed UTF-8.
std::size_t valid_utf8_prefix(std::string_view text) noexcept;

}  // namespace waste::tokenizer

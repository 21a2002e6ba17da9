// Parsing of the tiktoken rank file (tokenizer.model): one "<base64 bytes> <rank>" per line.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "shared/result.hpp"

namespace waste::tokenizer {

struct RankEntry {
  std::string bytes;  // the token's raw bytes (decoded base64)
  int rank = 0;       // = token id
};

// Decodes standard-alphabet base64 the way the reference engine does: '=' ends the input,
// characters outside the alphabet are skipped (so stray '\r' from CRLF files is harmless).
std::string decode_base64(std::string_view text);

// Parses a whole rank file. Lines without a space are skipped (the format's rule); a rank that
// is not a non-negative integer, a repeated rank or a repeated byte string is a format error
// naming the line, because either would make encode and decode disagree.
Result<std::vector<RankEntry>> parse_rank_file(std::string_view text, std::string_view origin);

}  // namespace waste::tokenizer

// Tokenizer files of a converted container (reference §1.1, §5.5): tiktoken.model (or
// tokenizer.model) copied as tokenizer.model; specials.json from tokenizer_config.json's
// added_tokens_decoder, sorted by id; chat.json for the architecture (Kimi-Linear: the K2
// im_* format, K3: the XTML message format, GLM-5.3: configs/chat/glm-5.json), refused when one of its <|...|> markers is not a
// special token of this tokenizer.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "shared/result.hpp"

namespace waste::convert {

struct TokenizerOutcome {
  bool tokenizer = false;
  int n_specials = 0;
  bool chat = false;
  std::string chat_refused;  // why chat.json was not written (empty when written or not applicable)
};

// specials.json text from tokenizer_config.json text.
Result<std::string> specials_from_tokenizer_config(std::string_view config_text, std::string_view origin);
// The chat.json text for an arch ("kimi-linear", "kimi-k3", "glm5-next" or Glm5Next*), empty when
// none is known.
std::string chat_format_for(const std::string& arch);
// The <|...|> markers of a chat.json text that are not among `specials` (texts).
std::vector<std::string> missing_markers(const std::string& chat_json, const std::vector<std::string>& specials);

Result<TokenizerOutcome> write_tokenizer_files(const std::filesystem::path& src, const std::filesystem::path& out,
                                               const std::string& arch);

}  // namespace waste::convert

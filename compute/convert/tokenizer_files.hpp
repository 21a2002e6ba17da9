// Tokenizer files of a converted container (reference §1.1, §5.5): tiktoken.model (or
// tokenizer.model) copied as tokenizer.model; specials.json from tokenizer_config.json's
// added_tokens_decoder, sorted by id; chat.json for the architecture (Kimi-Linear: the K2
// im_* format, K3: the XTML message format, GLM-5.3: configs/chat/glm-5.json, compiled in), refused when one of its
// <|...|> markers is not a special token of this tokenizer. A checkpoint with no tiktoken file but a Hugging
// Face tokenizer.json (GLM-5.3-Flash) has it re-encoded (compute/convert/hf_tokenizer.hpp): the rank file
// from its vocabulary, specials.json from its added_tokens.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "compute/convert/hf_tokenizer.hpp"
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
// The chat.json text for an arch ("kimi-linear", "kimi-k3", "glm5-next" or Glm5Next*,
// deepseek-v4.1, DeepseekV41ForCausalLM or deepseek_v41), empty when none is known.
std::string chat_format_for(const std::string& arch);
// The <|...|> markers of a chat.json text that are not among `specials` (texts).
std::vector<std::string> missing_markers(const std::string& chat_json, const std::vector<std::string>& specials);

// The checkpoint's tokenizer.json converted, when it ships no tiktoken.model / tokenizer.model
// (nullopt then, or when it has neither). Read and checked before the converter writes anything.
Result<std::optional<HfTokenizer>> load_hf_tokenizer(const std::filesystem::path& src);
// The id of tokenizer_config.json's eos_token among `hf`'s added tokens (nullopt: no eos_token).
Result<std::optional<int>> hf_eos_token_id(const std::filesystem::path& src, const HfTokenizer& hf);

Result<TokenizerOutcome> write_tokenizer_files(const std::filesystem::path& src, const std::filesystem::path& out,
                                               const std::string& arch, const HfTokenizer* hf = nullptr);

}  // namespace waste::convert

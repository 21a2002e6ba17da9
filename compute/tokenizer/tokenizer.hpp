// Tokenizer: tiktoken-exact BPE over a container's tokenizer.model + specials.json.
//
// Two encode modes (reference §5.2): plain, for all user content, where special-token texts are
// ordinary text; and markup, for templates only, where each special text becomes its id.
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "compute/tokenizer/bpe.hpp"
#include "compute/tokenizer/pre_tokenizer.hpp"
#include "compute/tokenizer/special_tokens.hpp"
#include "shared/result.hpp"

namespace waste {

using tokenizer::Special;

class Tokenizer {
 public:
  // Reads `tokenizer.model` (or `tiktoken.model`) and, if present, `specials.json` from a container
  // directory. The pattern is the container's: Kimi's, unless its manifest.json's config says
  // `"tokenizer_han_split": false` (GLM) or `"tokenizer_pattern": 1` (DeepSeek-V4.1):
  // pattern_for_config. A config `bos_token_id` that names a special becomes bos() (DeepSeek's
  // BOS is id 0, inside the BPE table).
  static Result<Tokenizer> load(const std::filesystem::path& container_dir);
  static Result<Tokenizer> load(const std::filesystem::path& container_dir, tokenizer::Pattern pattern);
  // Explicit files; an empty specials path means no specials.
  static Result<Tokenizer> load_files(const std::filesystem::path& rank_file,
                                      const std::filesystem::path& specials_file,
                                      tokenizer::Pattern pattern = tokenizer::kKimiPattern);
  // Specials may take ids the rank file leaves out, below its highest rank too (DeepSeek's BOS,
  // EOS and PAD are ids 0..2 of its BPE table); an id both use is an error.
  static Result<Tokenizer> from_ranks(std::string_view rank_file_text, std::vector<Special> specials,
                                      tokenizer::Pattern pattern = tokenizer::kKimiPattern);

  // Plain mode: special texts are ordinary text, so user input can never forge a control token.
  std::vector<int> encode(std::string_view text) const;
  void encode(std::string_view text, std::vector<int>& ids) const;  // appends
  // Markup mode: the earliest special (longest at equal offsets) becomes its id; the text before
  // it is pre-tokenized on its own, as tiktoken does.
  std::vector<int> encode_markup(std::string_view text) const;
  void encode_markup(std::string_view text, std::vector<int>& ids) const;  // appends

  // Concatenated bytes of the tokens (special ids give their text). Ids outside the vocabulary
  // or in a gap of the rank file decode to nothing; use valid_id() to check first.
  std::string decode(std::span<const int> ids) const;
  std::string decode_token(int id) const;
  bool valid_id(int id) const noexcept;
  bool is_special(int id) const noexcept;

  // n_base() unless set: the first id after the BPE table (Kimi's layout).
  int bos() const noexcept { return bos_; }
  void set_bos(int id) noexcept { bos_ = id; }
  int eos() const noexcept { return eos_; }
  // config.eos_token_id overrides the default when > 0 (reference §5.2).
  void set_eos(int id) noexcept {
    eos_ = id;
    eos_ids_ = {id};
  }
  // A list (GLM: end of text and two turn markers): the first is eos(), all are eos_ids().
  void set_eos_ids(std::span<const int> ids) {
    if (ids.empty()) return;
    eos_ = ids.front();
    eos_ids_.assign(ids.begin(), ids.end());
  }
  // Every id that ends generation as an eos: {eos()} unless a list was set.
  std::vector<int> eos_ids() const { return eos_ids_.empty() ? std::vector<int>{eos_} : eos_ids_; }
  int vocab() const noexcept { return static_cast<int>(tokens_.size()); }
  // One past the highest rank of the rank file: the first id after the BPE table.
  int n_base() const noexcept { return n_base_; }
  std::optional<int> special_id(std::string_view text) const;
  const std::vector<Special>& specials() const noexcept { return specials_.specials(); }
  const tokenizer::PreTokenizer& pre_tokenizer() const noexcept { return pre_tokenizer_; }

 private:
  Tokenizer(tokenizer::PreTokenizer pre_tokenizer) : pre_tokenizer_(std::move(pre_tokenizer)) {}
  void encode_ordinary(std::string_view text, std::vector<int>& ids) const;

  tokenizer::PreTokenizer pre_tokenizer_;
  tokenizer::BytePairEncoder bpe_;
  tokenizer::SpecialMatcher specials_;
  std::vector<std::string> tokens_;  // id -> bytes (special text for specials; empty for gaps)
  std::vector<bool> special_flags_;  // id -> is a special
  int n_base_ = 0;
  int bos_ = 0;
  int eos_ = 0;
  std::vector<int> eos_ids_;  // empty: {eos_}
};

}  // namespace waste

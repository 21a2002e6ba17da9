#include "compute/sampling/grammar/token_index.hpp"

#include <algorithm>

#include "compute/sampling/grammar/grammar.hpp"
#include "compute/tokenizer/tokenizer.hpp"

namespace waste::grammar {

TokenIndex::TokenIndex(std::vector<std::string> tokens, std::vector<Kind> kinds)
    : tokens_(std::move(tokens)), kinds_(std::move(kinds)) {
  for (std::size_t id = 0; id < tokens_.size(); ++id) {
    if (kinds_[id] == Kind::eos) eos_.push_back(std::int32_t(id));
    if (kinds_[id] != Kind::ordinary) continue;
    sorted_.push_back(std::int32_t(id));
    max_len_ = std::max(max_len_, tokens_[id].size());
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](std::int32_t a, std::int32_t b) {
    return tokens_[std::size_t(a)] != tokens_[std::size_t(b)] ? tokens_[std::size_t(a)] < tokens_[std::size_t(b)] : a < b;
  });
  offsets_.reserve(sorted_.size() + 1);
  offsets_.push_back(0);
  for (std::int32_t id : sorted_) {
    flat_ += tokens_[std::size_t(id)];
    offsets_.push_back(std::uint32_t(flat_.size()));
  }
  std::size_t i = 0;
  for (unsigned b = 0; b < 256; ++b) {
    while (i < sorted_.size() && static_cast<unsigned char>(tokens_[std::size_t(sorted_[i])][0]) == b) ++i;
    first_byte_end_[b] = i;
  }
  lcp_.assign(sorted_.size(), 0);
  for (std::size_t i = 1; i < sorted_.size(); ++i) {
    const std::string& a = tokens_[std::size_t(sorted_[i - 1])];
    const std::string& b = tokens_[std::size_t(sorted_[i])];
    std::size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    lcp_[i] = std::uint32_t(n);
  }
}

Result<std::shared_ptr<const TokenIndex>> build_token_index(std::vector<std::string> tokens,
                                                            std::vector<int> special_ids, std::vector<int> eos_ids) {
  std::vector<TokenIndex::Kind> kinds(tokens.size(), TokenIndex::Kind::ordinary);
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    if (tokens[id].empty()) kinds[id] = TokenIndex::Kind::never;
  }
  for (int id : special_ids) {
    if (id < 0 || std::size_t(id) >= tokens.size()) {
      return make_error(Errc::argument, "token index: special id " + std::to_string(id) + " is outside the vocabulary of " +
                                            std::to_string(tokens.size()));
    }
    kinds[std::size_t(id)] = TokenIndex::Kind::never;
  }
  for (int id : eos_ids) {
    if (id < 0 || std::size_t(id) >= tokens.size()) {
      return make_error(Errc::argument, "token index: eos id " + std::to_string(id) + " is outside the vocabulary of " +
                                            std::to_string(tokens.size()));
    }
    kinds[std::size_t(id)] = TokenIndex::Kind::eos;
  }
  return std::make_shared<const TokenIndex>(std::move(tokens), std::move(kinds));
}

Result<std::shared_ptr<const TokenIndex>> build_token_index(const Tokenizer& tok, std::span<const int> extra_eos) {
  std::vector<std::string> tokens(std::size_t(tok.vocab()));
  std::vector<int> specials;
  for (int id = 0; id < tok.vocab(); ++id) {
    if (!tok.valid_id(id)) continue;
    if (tok.is_special(id)) {
      specials.push_back(id);
    } else {
      tokens[std::size_t(id)] = tok.decode_token(id);
    }
  }
  std::vector<int> eos(extra_eos.begin(), extra_eos.end());
  for (int id : tok.eos_ids()) {
    if (id >= 0 && id < tok.vocab() && std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  }
  return build_token_index(std::move(tokens), std::move(specials), std::move(eos));
}

}  // namespace waste::grammar

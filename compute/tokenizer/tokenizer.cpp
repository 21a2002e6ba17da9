#include "compute/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "compute/tokenizer/rank_file.hpp"

namespace waste {
namespace {

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(Errc::io, path.string() + ": cannot open");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return make_error(Errc::io, path.string() + ": read failed");
  return buffer.str();
}

}  // namespace

Result<Tokenizer> Tokenizer::load(const std::filesystem::path& container_dir) {
  // The pattern the container states (manifest.json config.tokenizer_han_split); a directory
  // without a manifest (a tokenizer alone) gets Kimi's.
  const auto manifest = container_dir / "manifest.json";
  std::error_code ec;
  if (!std::filesystem::exists(manifest, ec)) return load(container_dir, tokenizer::kKimiPattern);
  auto text = read_file(manifest);
  if (!text) return std::unexpected(text.error());
  const auto doc = nlohmann::json::parse(*text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return make_error(Errc::format, manifest.string() + ": not a JSON object");
  const nlohmann::json config = doc.value("config", nlohmann::json());
  auto pattern = tokenizer::pattern_for_config(config);
  if (!pattern) return std::unexpected(pattern.error().with_context(manifest.string()));
  auto tok = load(container_dir, *pattern);
  if (!tok) return tok;
  // A stated BOS that is one of the specials (DeepSeek: 0); otherwise the n_base() default.
  if (config.is_object()) {
    if (auto bos = config.find("bos_token_id"); bos != config.end() && bos->is_number_integer()) {
      const auto id = bos->get<std::int64_t>();
      if (id >= 0 && id < tok->vocab() && tok->is_special(static_cast<int>(id))) tok->set_bos(static_cast<int>(id));
    }
  }
  return tok;
}

Result<Tokenizer> Tokenizer::load(const std::filesystem::path& container_dir, tokenizer::Pattern pattern) {
  std::filesystem::path rank_file = container_dir / "tokenizer.model";
  std::error_code ec;
  if (!std::filesystem::exists(rank_file, ec) && std::filesystem::exists(container_dir / "tiktoken.model", ec)) {
    rank_file = container_dir / "tiktoken.model";
  }
  std::filesystem::path specials_file = container_dir / "specials.json";
  if (!std::filesystem::exists(specials_file, ec)) specials_file.clear();
  return load_files(rank_file, specials_file, pattern);
}

Result<Tokenizer> Tokenizer::load_files(const std::filesystem::path& rank_file,
                                        const std::filesystem::path& specials_file, tokenizer::Pattern pattern) {
  auto rank_text = read_file(rank_file);
  if (!rank_text) return std::unexpected(rank_text.error());
  std::vector<Special> specials;
  if (!specials_file.empty()) {
    auto specials_text = read_file(specials_file);
    if (!specials_text) return std::unexpected(specials_text.error());
    auto parsed = tokenizer::parse_specials(*specials_text, specials_file.string());
    if (!parsed) return std::unexpected(parsed.error());
    specials = std::move(*parsed);
  }
  auto result = from_ranks(*rank_text, std::move(specials), pattern);
  if (!result) return std::unexpected(result.error().with_context(rank_file.string()));
  return result;
}

Result<Tokenizer> Tokenizer::from_ranks(std::string_view rank_file_text, std::vector<Special> specials,
                                        tokenizer::Pattern pattern) {
  auto pre = tokenizer::PreTokenizer::create(pattern);
  if (!pre) return std::unexpected(pre.error());
  auto entries = tokenizer::parse_rank_file(rank_file_text, "rank file");
  if (!entries) return std::unexpected(entries.error());
  if (entries->empty()) return make_error(Errc::format, "rank file: no tokens");

  Tokenizer tok(std::move(*pre));
  tok.bpe_ = tokenizer::BytePairEncoder(*entries);
  // Any byte string must be encodable, which needs every single byte to be a token.
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    if (tok.bpe_.rank_of(std::string_view(&byte, 1)) < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      return make_error(Errc::format, std::string("rank file: byte ") + hex + " has no token of its own");
    }
  }
  int max_rank = -1;
  for (const auto& e : *entries) max_rank = std::max(max_rank, e.rank);
  int max_id = max_rank;
  for (const auto& s : specials) max_id = std::max(max_id, s.id);
  tok.tokens_.assign(static_cast<std::size_t>(max_id) + 1, std::string{});
  tok.special_flags_.assign(tok.tokens_.size(), false);
  for (auto& e : *entries) tok.tokens_[static_cast<std::size_t>(e.rank)] = std::move(e.bytes);
  for (const auto& s : specials) {
    auto& slot = tok.tokens_[static_cast<std::size_t>(s.id)];
    if (!slot.empty()) {
      return make_error(Errc::format, "special '" + s.text + "' has id " + std::to_string(s.id) +
                                          ", which the rank file already uses");
    }
    slot = s.text;
    tok.special_flags_[static_cast<std::size_t>(s.id)] = true;
  }
  tok.n_base_ = max_rank + 1;  // = the entry count for a rank file without gaps
  tok.bos_ = tok.n_base_;
  tok.eos_ = tok.n_base_ + 2;
  tok.specials_ = tokenizer::SpecialMatcher(std::move(specials));
  return tok;
}

void Tokenizer::encode_ordinary(std::string_view text, std::vector<int>& ids) const {
  std::vector<std::string_view> pieces;
  pre_tokenizer_.split(text, pieces);
  for (const std::string_view piece : pieces) {
    // Cannot fail: from_ranks checked that every byte is a token.
    bpe_.encode_piece(piece, ids);
  }
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  encode(text, ids);
  return ids;
}

void Tokenizer::encode(std::string_view text, std::vector<int>& ids) const { encode_ordinary(text, ids); }

std::vector<int> Tokenizer::encode_markup(std::string_view text) const {
  std::vector<int> ids;
  encode_markup(text, ids);
  return ids;
}

void Tokenizer::encode_markup(std::string_view text, std::vector<int>& ids) const {
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto match = specials_.find(text, pos);
    if (!match) break;
    encode_ordinary(text.substr(pos, match->offset - pos), ids);
    ids.push_back(match->id);
    pos = match->offset + match->length;
  }
  encode_ordinary(text.substr(pos), ids);
}

bool Tokenizer::valid_id(int id) const noexcept {
  return id >= 0 && id < vocab() && !tokens_[static_cast<std::size_t>(id)].empty();
}

bool Tokenizer::is_special(int id) const noexcept {
  return id >= 0 && id < vocab() && special_flags_[static_cast<std::size_t>(id)];
}

std::string Tokenizer::decode_token(int id) const {
  if (id < 0 || id >= vocab()) return {};
  return tokens_[static_cast<std::size_t>(id)];
}

std::string Tokenizer::decode(std::span<const int> ids) const {
  std::string out;
  for (const int id : ids) {
    if (id >= 0 && id < vocab()) out += tokens_[static_cast<std::size_t>(id)];
  }
  return out;
}

std::optional<int> Tokenizer::special_id(std::string_view text) const {
  for (const Special& s : specials_.specials()) {
    if (s.text == text) return s.id;
  }
  return std::nullopt;
}

}  // namespace waste

#include "compute/convert/hf_tokenizer.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "compute/tokenizer/pre_tokenizer.hpp"
#include "compute/tokenizer/utf8.hpp"
#include "shared/json_depth.hpp"

namespace waste::convert {
namespace {

using json = nlohmann::json;

std::string base64(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const unsigned v = unsigned(std::uint8_t(bytes[i])) << 16 | unsigned(std::uint8_t(bytes[i + 1])) << 8 |
                       unsigned(std::uint8_t(bytes[i + 2]));
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (const std::size_t rest = bytes.size() - i; rest > 0) {
    unsigned v = unsigned(std::uint8_t(bytes[i])) << 16;
    if (rest == 2) v |= unsigned(std::uint8_t(bytes[i + 1])) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// The Split pre-tokenizers anywhere in the pre_tokenizer tree (Sequence nests them), in the order
// they apply.
void split_nodes(const json& node, std::vector<const json*>& out, int depth = 0) {
  if (!node.is_object() || depth > 16) return;
  if (auto t = node.find("type"); t != node.end() && *t == "Split") out.push_back(&node);
  if (auto seq = node.find("pretokenizers"); seq != node.end() && seq->is_array()) {
    for (const auto& child : *seq) split_nodes(child, out, depth + 1);
  }
}

}  // namespace

const std::vector<char32_t>& gpt2_byte_chars() {
  static const std::vector<char32_t> table = [] {
    std::vector<char32_t> t(256, 0);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[std::size_t(b)] = printable ? char32_t(b) : next++;
    }
    return t;
  }();
  return table;
}

Result<HfTokenizer> convert_hf_tokenizer(std::string_view text, std::string_view origin_view) {
  const std::string origin(origin_view);
  auto fail = [&](const std::string& what) -> Status { return make_error(Errc::format, origin + ": " + what); };
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return std::unexpected(fail("not a JSON object").error());
  if (nested_deeper_than(doc, 32)) return std::unexpected(fail("nested deeper than 32 levels").error());
  const json model = doc.value("model", json::object());
  if (!model.is_object() || model.value("type", json()) != "BPE") {
    const json type = model.is_object() ? model.value("type", json()) : json();
    return std::unexpected(fail("model.type is " + type.dump() + ", not \"BPE\"").error());
  }
  if (model.value("byte_fallback", json(false)) == true) {
    return std::unexpected(
        fail("model.byte_fallback is set (tokens spelled <0xNN>); only byte-level BPE is converted").error());
  }

  HfTokenizer out;
  // ---- The pre-tokenizer pattern(s): ones this engine implements, or refused.
  const json pre_tokenizer = doc.value("pre_tokenizer", json());
  std::vector<const json*> splits;  // into pre_tokenizer, which outlives them
  split_nodes(pre_tokenizer, splits);
  std::vector<std::string> patterns;
  for (std::size_t i = 0; i < splits.size(); ++i) {
    const json& split = *splits[i];
    const json pattern = split.value("pattern", json());
    if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string()) {
      return std::unexpected(fail("pre_tokenizer Split " + std::to_string(i + 1) + " has no Regex pattern (" +
                                  pattern.dump() + "); only Regex Splits are converted").error());
    }
    if (const json behavior = split.value("behavior", json("Isolated")); behavior != "Isolated") {
      return std::unexpected(fail("pre_tokenizer Split " + std::to_string(i + 1) + " has behavior " +
                                  behavior.dump() + "; only \"Isolated\" is implemented").error());
    }
    if (split.value("invert", json(false)) != false) {
      return std::unexpected(fail("pre_tokenizer Split " + std::to_string(i + 1) +
                                  " is inverted; only matches as pieces are implemented").error());
    }
    patterns.push_back(pattern["Regex"].get<std::string>());
  }
  const bool deepseek = patterns.size() == tokenizer::kDeepSeekSplits.size() &&
                        std::equal(patterns.begin(), patterns.end(), tokenizer::kDeepSeekSplits.begin());
  if (deepseek) {
    out.tokenizer_pattern = tokenizer::kTokenizerPatternDeepSeek;
    out.han_split = true;  // its CJK split is unconditional; no tokenizer_han_split key
  } else if (patterns.size() != 1) {
    return std::unexpected(
        fail("pre_tokenizer has " + std::to_string(patterns.size()) +
             " Split patterns; one Split with a Regex pattern, or DeepSeek-V4.1's three, is converted").error());
  } else if (patterns[0] == tokenizer::kCl100kPattern) {
    out.han_split = false;
  } else if (patterns[0] == tokenizer::kKimiPattern) {
    out.han_split = true;
  } else {
    return std::unexpected(fail("pre-tokenizer pattern " + json(patterns[0]).dump() +
                                " is not one WASTE implements (GLM's, with no Han branch, or Kimi's)").error());
  }

  // ---- Added tokens: specials (markup-matched), out of the rank file. Read first: an added
  // token may also sit in the vocabulary (DeepSeek's ids 0..2) and is not byte-level text there.
  if (auto at = doc.find("added_tokens"); at != doc.end() && !at->is_null()) {
    if (!at->is_array()) return std::unexpected(fail("added_tokens is not an array").error());
    for (const auto& t : *at) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || t["id"].get<std::int64_t>() < 0 ||
          t["id"].get<std::int64_t>() >= (1 << 24) || !t.contains("content") || !t["content"].is_string() ||
          t["content"].get<std::string>().empty()) {
        return std::unexpected(fail("added token " + t.dump() + " lacks an id 0..16777215 or a content").error());
      }
      out.added.push_back({int(t["id"].get<std::int64_t>()), t["content"].get<std::string>()});
    }
  }
  std::sort(out.added.begin(), out.added.end(), [](const auto& x, const auto& y) { return x.id < y.id; });
  for (std::size_t i = 1; i < out.added.size(); ++i) {
    if (out.added[i].id == out.added[i - 1].id) {
      return std::unexpected(fail("added token id " + std::to_string(out.added[i].id) + " is used twice").error());
    }
  }
  std::unordered_map<std::string, int> added_id_of;
  for (const auto& a : out.added) added_id_of.emplace(a.text, a.id);

  // ---- Vocabulary: GPT-2 escaped text -> raw bytes, by id.
  std::unordered_map<char32_t, std::uint8_t> byte_of;
  for (int b = 0; b < 256; ++b) byte_of[gpt2_byte_chars()[std::size_t(b)]] = std::uint8_t(b);
  const json vocab = model.value("vocab", json());
  if (!vocab.is_object() || vocab.empty()) return std::unexpected(fail("model.vocab is not a non-empty object").error());
  std::map<int, std::string> by_id;  // id -> raw bytes
  std::unordered_map<std::string, int> id_of_text;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const std::string& t = it.key();
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() >= (1 << 24)) {
      return std::unexpected(fail("model.vocab[" + json(t).dump() + "] is not a token id 0..16777215").error());
    }
    const int id = int(it->get<std::int64_t>());
    if (auto added = added_id_of.find(t); added != added_id_of.end() && added->second == id) {
      ++out.n_inline_specials;  // a special inside the BPE table: no bytes, no rank
      id_of_text[t] = id;
      continue;
    }
    std::string raw;
    for (std::size_t i = 0; i < t.size();) {
      char32_t cp = 0;
      const std::size_t n = tokenizer::decode_utf8(std::string_view(t).substr(i), cp);
      auto b = n == 0 ? byte_of.end() : byte_of.find(cp);
      if (b == byte_of.end()) {
        return std::unexpected(fail("token " + json(t).dump() + " (id " + std::to_string(id) +
                                    ") has a character outside the GPT-2 byte map; not a byte-level BPE").error());
      }
      raw += char(b->second);
      i += n;
    }
    if (raw.empty()) return std::unexpected(fail("token id " + std::to_string(id) + " is empty").error());
    if (!by_id.emplace(id, raw).second) {
      return std::unexpected(fail("id " + std::to_string(id) + " is used by two tokens").error());
    }
    id_of_text[t] = id;
  }

  // ---- Merges: each result in the vocabulary, results in rank order.
  const json merges = model.value("merges", json::array());
  if (!merges.is_array()) return std::unexpected(fail("model.merges is not an array").error());
  int previous = -1;
  for (std::size_t m = 0; m < merges.size(); ++m) {
    const json& e = merges[m];
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const std::size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size()) {
        return std::unexpected(fail("merge " + std::to_string(m) + " " + e.dump() + " is not \"left right\"").error());
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      return std::unexpected(fail("merge " + std::to_string(m) + " " + e.dump() + " is not a pair of tokens").error());
    }
    const std::string shown = json(a + " " + b).dump();
    auto result = id_of_text.find(a + b);
    if (result == id_of_text.end()) {
      return std::unexpected(fail("merge " + std::to_string(m) + " (" + shown + ") makes a token that is not in the vocabulary").error());
    }
    if (result->second < previous) {
      return std::unexpected(fail("merges are not in rank order: merge " + std::to_string(m) + " (" + shown +
                                  ") makes id " + std::to_string(result->second) + " after id " +
                                  std::to_string(previous) +
                                  "; rank-ordered BPE would encode this tokenizer differently").error());
    }
    previous = result->second;
  }
  out.n_merges = int(merges.size());

  for (const auto& a : out.added) by_id.erase(a.id);  // an added token is matched whole, never merged into
  bool single[256] = {};
  for (const auto& kv : by_id) if (kv.second.size() == 1) single[std::uint8_t(kv.second[0])] = true;
  for (int b = 0; b < 256; ++b) {
    if (!single[b]) return std::unexpected(fail("byte " + std::to_string(b) + " has no token of its own").error());
  }
  for (const auto& [id, raw] : by_id) {
    out.rank_file += base64(raw);
    out.rank_file += ' ';
    out.rank_file += std::to_string(id);
    out.rank_file += '\n';
  }
  out.n_tokens = int(by_id.size());
  return out;
}

void add_pattern_keys(const HfTokenizer& hf, nlohmann::json& config) {
  if (!hf.han_split) config["tokenizer_han_split"] = false;
  if (hf.tokenizer_pattern != tokenizer::kTokenizerPatternCl100k) config["tokenizer_pattern"] = hf.tokenizer_pattern;
}

std::string specials_json(const std::vector<HfAddedToken>& added) {
  json out = json::array();
  for (const auto& a : added) out.push_back({{"id", a.id}, {"text", a.text}});
  return out.dump(1) + "\n";
}

}  // namespace waste::convert

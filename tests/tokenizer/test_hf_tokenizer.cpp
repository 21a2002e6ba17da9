// A Hugging Face tokenizer.json (GLM-5.3-Flash's kind) re-encoded as the container's rank file
// (compute/convert/hf_tokenizer.hpp), and the pattern a container's manifest selects. The
// tokenizer.json is built here: byte tokens at ids 0..255 (id = byte value), merges making
// 256 = E8 82, 257 = "股" (E8 82 A1), 258 = "A股", 259 = "th", 260 = " th", added tokens 300, 301.
// Expected ids are worked by hand from those merges.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "compute/convert/hf_tokenizer.hpp"
#include "compute/tokenizer/pre_tokenizer.hpp"
#include "compute/tokenizer/tokenizer.hpp"
#include "tests/shared/temp_dir.hpp"

using namespace waste;
using nlohmann::json;

namespace {

// GPT-2's escape, written here independently of the converter: printable Latin-1 bytes stand for
// themselves, the 68 others take U+0100.. in byte order.
std::string escape(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    char32_t cp = b;
    if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))) {
      int n = 0;
      for (int x = 0; x < b; ++x) n += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE)) ? 1 : 0;
      cp = 256 + char32_t(n);
    }
    if (cp < 0x80) {
      out += char(cp);
    } else {  // < 0x800 here
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

const std::string kGu = "\xE8\x82\xA1";  // 股

json make_tokenizer_json(std::string_view pattern = tokenizer::kGlmPattern) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[escape(std::string(1, char(b)))] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"\xE8", "\x82"}, {"\xE8\x82", "\xA1"}, {"A", kGu}, {"t", "h"}, {" ", "th"}};
  json m = json::array();
  int id = 256;
  for (const auto& [a, b] : merges) {
    vocab[escape(a + b)] = id++;
    m.push_back(escape(a) + " " + escape(b));
  }
  return {{"version", "1.0"},
          {"added_tokens", {{{"id", 301}, {"content", "<|user|>"}, {"special", true}},
                            {{"id", 300}, {"content", "<|endoftext|>"}, {"special", true}}}},
          {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {
              {{"type", "Split"}, {"pattern", {{"Regex", std::string(pattern)}}}, {"behavior", "Isolated"}, {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
          {"model", {{"type", "BPE"}, {"byte_fallback", false}, {"vocab", vocab}, {"merges", m}}}};
}

Tokenizer load_with(const convert::HfTokenizer& hf, std::string_view pattern) {
  std::vector<Special> specials;
  for (const auto& a : hf.added) specials.push_back({a.id, a.text});
  auto tok = Tokenizer::from_ranks(hf.rank_file, specials, pattern);
  REQUIRE(tok.has_value());
  return std::move(*tok);
}

void write(const std::filesystem::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

}  // namespace

TEST_CASE("tokenizer.json re-encoded: bytes undone, ranks = ids, added tokens apart, GLM pattern found",
          "[tokenizer][hf]") {
  auto hf = convert::convert_hf_tokenizer(make_tokenizer_json().dump(), "tokenizer.json");
  INFO((hf ? std::string() : hf.error().message));
  REQUIRE(hf.has_value());
  CHECK_FALSE(hf->han_split);
  CHECK(hf->n_tokens == 261);
  CHECK(hf->n_merges == 5);
  REQUIRE(hf->added.size() == 2);
  CHECK(hf->added[0].id == 300);
  CHECK(hf->added[0].text == "<|endoftext|>");
  CHECK(convert::specials_json(hf->added) ==
        "[\n {\n  \"id\": 300,\n  \"text\": \"<|endoftext|>\"\n },\n {\n  \"id\": 301,\n  \"text\": \"<|user|>\"\n }\n]\n");
  // Lines in id order: byte 0 is "AA==", the 258th token is base64("A股") = "QeiCoQ==".
  CHECK(hf->rank_file.starts_with("AA== 0\nAQ== 1\n"));
  CHECK(hf->rank_file.find("\nQeiCoQ== 258\n") != std::string::npos);
  CHECK(hf->rank_file.ends_with("IHRo 260\n"));  // " th"

  const Tokenizer glm = load_with(*hf, tokenizer::kGlmPattern);
  const Tokenizer kimi = load_with(*hf, tokenizer::kKimiPattern);
  // Han running into Latin: one piece without the Han branch, so the cross-boundary token is reachable.
  CHECK(glm.encode("A" + kGu) == std::vector<int>{258});
  CHECK(kimi.encode("A" + kGu) == std::vector<int>{65, 257});
  CHECK(glm.encode(" A" + kGu + "x") == std::vector<int>{32, 258, 120});
  CHECK(kimi.encode(" A" + kGu + "x") == std::vector<int>{32, 65, 257, 120});
  CHECK(glm.encode(" the") == std::vector<int>{260, 101});
  CHECK(glm.encode_markup("<|user|>A" + kGu + "<|endoftext|>") == std::vector<int>{301, 258, 300});
  CHECK(glm.decode(std::vector<int>{301, 258}) == "<|user|>A" + kGu);

  // Kimi's own pattern in a tokenizer.json selects the Han split.
  auto k = convert::convert_hf_tokenizer(make_tokenizer_json(tokenizer::kKimiPattern).dump(), "tokenizer.json");
  REQUIRE(k.has_value());
  CHECK(k->han_split);

  // The manifest keys the converter writes select each pattern again.
  json glm_config = json::object();
  convert::add_pattern_keys(*hf, glm_config);
  CHECK(glm_config == json::parse(R"({"tokenizer_han_split": false})"));
  CHECK(*tokenizer::pattern_for_config(glm_config) == tokenizer::kGlmPattern);
  json kimi_config = json::object();
  convert::add_pattern_keys(*k, kimi_config);
  CHECK(kimi_config == json::object());
}

TEST_CASE("hazard: a tokenizer.json the rank file cannot reproduce is refused with the reason", "[tokenizer][hf]") {
  json t = make_tokenizer_json();
  // Merges out of rank order: "A 股" (258) after "t h" (259).
  auto& m = t["model"]["merges"];
  std::swap(m[2], m[3]);
  auto bad = convert::convert_hf_tokenizer(t.dump(), "tok.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "tok.json: merges are not in rank order: merge 3 (\"" + escape("A") + " " + escape(kGu) +
                                   "\") makes id 258 after id 259; rank-ordered BPE would encode this tokenizer differently");

  t = make_tokenizer_json();
  t["model"]["merges"].push_back(escape("q") + " " + escape("z"));
  bad = convert::convert_hf_tokenizer(t.dump(), "tok.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "tok.json: merge 5 (\"q z\") makes a token that is not in the vocabulary");

  t = make_tokenizer_json(tokenizer::kO200kPattern);
  bad = convert::convert_hf_tokenizer(t.dump(), "tok.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "tok.json: pre-tokenizer pattern " + json(std::string(tokenizer::kO200kPattern)).dump() +
                                   " is not one WASTE implements (GLM's, with no Han branch, or Kimi's)");

  t = make_tokenizer_json();
  t["model"]["vocab"]["\xE4\xB8\xAD"] = 270;  // 中 written raw: not a byte-level escape
  bad = convert::convert_hf_tokenizer(t.dump(), "tok.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message ==
        "tok.json: token \"\xE4\xB8\xAD\" (id 270) has a character outside the GPT-2 byte map; not a byte-level BPE");

  t = make_tokenizer_json();
  t["model"]["byte_fallback"] = true;
  bad = convert::convert_hf_tokenizer(t.dump(), "tok.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message ==
        "tok.json: model.byte_fallback is set (tokens spelled <0xNN>); only byte-level BPE is converted");

  t = make_tokenizer_json();
  t["model"]["type"] = "Unigram";
  bad = convert::convert_hf_tokenizer(t.dump(), "tok.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "tok.json: model.type is \"Unigram\", not \"BPE\"");

  t = make_tokenizer_json();
  t["pre_tokenizer"] = {{"type", "ByteLevel"}, {"use_regex", true}};
  bad = convert::convert_hf_tokenizer(t.dump(), "tok.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message ==
        "tok.json: pre_tokenizer has 0 Split patterns; one Split with a Regex pattern, or DeepSeek-V4.1's three, is "
        "converted");

  t = make_tokenizer_json();
  t["model"]["vocab"].erase(escape("\x07"));
  bad = convert::convert_hf_tokenizer(t.dump(), "tok.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "tok.json: byte 7 has no token of its own");

  bad = convert::convert_hf_tokenizer("[1, 2]", "tok.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "tok.json: not a JSON object");
}

TEST_CASE("a container's manifest picks the pattern: tokenizer_han_split false is GLM's, absent is Kimi's",
          "[tokenizer][hf]") {
  CHECK(tokenizer::kGlmPattern == tokenizer::kCl100kPattern);
  CHECK(*tokenizer::pattern_for_config(json::parse(R"({"tokenizer_han_split": false})")) == tokenizer::kGlmPattern);
  CHECK(*tokenizer::pattern_for_config(json::parse(R"({"tokenizer_han_split": true})")) == tokenizer::kKimiPattern);
  CHECK(*tokenizer::pattern_for_config(json::object()) == tokenizer::kKimiPattern);

  auto hf = convert::convert_hf_tokenizer(make_tokenizer_json().dump(), "tokenizer.json");
  REQUIRE(hf.has_value());
  test::TempDir dir("hf-tok");
  write(dir.path() / "tokenizer.model", hf->rank_file);
  write(dir.path() / "specials.json", convert::specials_json(hf->added));
  auto plain = Tokenizer::load(dir.path());  // no manifest: Kimi's
  REQUIRE(plain.has_value());
  CHECK(plain->encode("A" + kGu) == std::vector<int>{65, 257});
  write(dir.path() / "manifest.json", R"({"format_version": 0, "config": {"tokenizer_han_split": false}})");
  auto glm = Tokenizer::load(dir.path());
  REQUIRE(glm.has_value());
  CHECK(glm->encode("A" + kGu) == std::vector<int>{258});
  write(dir.path() / "manifest.json", R"({"format_version": 0, "config": {"tokenizer_han_split": "no"}})");
  auto bad = Tokenizer::load(dir.path());
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == (dir.path() / "manifest.json").string() +
                                   ": config.tokenizer_han_split: expected a boolean, found \"no\"");
}

TEST_CASE("an eos list: the first id is eos(), every id is in eos_ids()", "[tokenizer][hf]") {
  auto hf = convert::convert_hf_tokenizer(make_tokenizer_json().dump(), "tokenizer.json");
  REQUIRE(hf.has_value());
  Tokenizer tok = load_with(*hf, tokenizer::kGlmPattern);
  const std::vector<int> ids{300, 301};
  tok.set_eos_ids(ids);
  CHECK(tok.eos() == 300);
  CHECK(tok.eos_ids() == ids);
  tok.set_eos(301);
  CHECK(tok.eos_ids() == std::vector<int>{301});
}

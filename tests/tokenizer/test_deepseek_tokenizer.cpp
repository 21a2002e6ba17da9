// DeepSeek-V4.1-Flash's tokenizer (model-families.md §2.4): the three isolating splits applied in
// sequence, a container selecting them (`tokenizer_pattern` 1), and a tokenizer.json of that kind
// (BOS/EOS/PAD at ids 0..2 inside the BPE table, non-ASCII specials) re-encoded and run end to end.
//
// The release's tokenizer.json cannot be fetched here, so the expected pieces below are worked by
// hand from the documented patterns: split 1 `\p{N}{1,3}`; split 2 runs of U+4E00..U+9FA5,
// hiragana and katakana; split 3 `[ASCII punct][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ |
// ' '?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+`, each over the pieces of the one before.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/convert/hf_tokenizer.hpp"
#include "compute/tokenizer/pre_tokenizer.hpp"
#include "compute/tokenizer/tokenizer.hpp"
#include "tests/shared/temp_dir.hpp"

using namespace waste;
using nlohmann::json;
using tokenizer::PreTokenizer;
using V = std::vector<std::string>;

namespace {

std::vector<std::string> ds(std::string_view text) {
  static const auto pre = PreTokenizer::create(tokenizer::kDeepSeekPattern);
  REQUIRE(pre.has_value());
  std::vector<std::string> out;
  for (const auto piece : pre->split(text)) out.emplace_back(piece);
  return out;
}

}  // namespace

TEST_CASE("DeepSeek pattern: digit runs of at most three are isolated first, with nothing attached",
          "[tokenizer][deepseek]") {
  CHECK(ds("abc12345def") == V{"abc", "123", "45", "def"});
  CHECK(ds("3.14159") == V{"3", ".", "141", "59"});
  // The space before a number cannot join it: split 1 cut it off, split 3 sees "in " alone.
  CHECK(ds("in 2024 we") == V{"in", " ", "202", "4", " we"});
  // Arabic-Indic digits are \p{N} too.
  CHECK(ds("\xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6") == V{"\xD9\xA3\xD9\xA4\xD9\xA5", "\xD9\xA6"});
  // Inside CJK text the digit is its own piece and the ideographs around it are split apart.
  CHECK(ds("\xE7\xAC\xAC" "1" "\xE7\xAB\xA0") == V{"\xE7\xAC\xAC", "1", "\xE7\xAB\xA0"});  // 第1章
}

TEST_CASE("DeepSeek pattern: CJK ideographs, hiragana and katakana are isolated from Latin", "[tokenizer][deepseek]") {
  const std::string gupiao = "\xE8\x82\xA1\xE7\xA5\xA8";  // 股票
  CHECK(ds("A" + gupiao + "B") == V{"A", gupiao, "B"});
  // 我 love 中文: the spaces stay with the Latin middle, the last one on its own.
  CHECK(ds("\xE6\x88\x91 love \xE4\xB8\xAD\xE6\x96\x87") ==
        V{"\xE6\x88\x91", " love", " ", "\xE4\xB8\xAD\xE6\x96\x87"});
  // Kanji, hiragana and katakana in one run: 日本語ですカタカナ.
  const std::string ja = "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xA7\xE3\x81\x99\xE3\x82\xAB\xE3\x82\xBF"
                         "\xE3\x82\xAB\xE3\x83\x8A";
  CHECK(ds(ja + "x") == V{ja, "x"});
  // Outside the ranges: CJK Extension A (U+3400) and Hangul are plain letters for split 3.
  CHECK(ds("\xE3\x90\x80" "a") == V{"\xE3\x90\x80" "a"});
  CHECK(ds("\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 ok") == V{"\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", " ok"});
  // Ideographic full stop U+3002 is \p{P}, not in split 2's ranges: its own piece.
  CHECK(ds("\xE4\xB8\xAD\xE6\x96\x87\xE3\x80\x82" "abc") == V{"\xE4\xB8\xAD\xE6\x96\x87", "\xE3\x80\x82", "abc"});
}

TEST_CASE("DeepSeek pattern: ASCII punctuation takes the ASCII word after it, symbols and punctuation run together",
          "[tokenizer][deepseek]") {
  CHECK(ds("hello,world") == V{"hello", ",world"});
  CHECK(ds("(x)") == V{"(x", ")"});
  CHECK(ds("don't DON'T I'm") == V{"don", "'t", " DON", "'T", " I", "'m"});
  // Not an ASCII letter after the mark: the mark stands alone.
  CHECK(ds(",\xC3\xBC" "ber") == V{",", "\xC3\xBC" "ber"});
  CHECK(ds("a + b") == V{"a", " +", " b"});
  CHECK(ds("x\xE2\x82\xAC\xE2\x82\xAC" "y") == V{"x", "\xE2\x82\xAC\xE2\x82\xAC", "y"});  // € is \p{S}
  CHECK(ds("...abc") == V{"...", "abc"});
  CHECK(ds("!!\n\nok") == V{"!!\n\n", "ok"});
}

TEST_CASE("DeepSeek pattern: combining marks join letters, or stand alone after punctuation", "[tokenizer][deepseek]") {
  CHECK(ds("cafe\xCC\x81s") == V{"cafe\xCC\x81s"});
  // After a space the mark is a letter run of its own, with the space leading it.
  CHECK(ds(" \xCC\x81" "a") == V{" \xCC\x81" "a"});
  CHECK(ds("-\xCC\x81") == V{"-", "\xCC\x81"});
}

TEST_CASE("DeepSeek pattern: spaces and newlines", "[tokenizer][deepseek]") {
  CHECK(ds("a  b") == V{"a", " ", " b"});
  CHECK(ds("a\n\nb") == V{"a", "\n\n", "b"});
  CHECK(ds("a \n b") == V{"a", " \n", " b"});
  CHECK(ds("end   ") == V{"end", "   "});
  CHECK(ds("x\ty") == V{"x", "\ty"});
}

TEST_CASE("DeepSeek pattern: a mixed line, worked through all three splits", "[tokenizer][deepseek]") {
  CHECK(ds("Hello, \xE4\xB8\x96\xE7\x95\x8C! x+y=12345 (ok)\n\n  caf\xC3\xA9") ==
        V{"Hello", ",", " ", "\xE4\xB8\x96\xE7\x95\x8C", "!", " x", "+y", "=", "123", "45", " (", "ok", ")\n\n", " ",
          " caf\xC3\xA9"});
  // Any bytes still come back whole, ill-formed ones included.
  const std::string bytes = "a\xFF" "12\xE4\xB8 x";
  std::string joined;
  for (const auto& p : ds(bytes)) joined += p;
  CHECK(joined == bytes);
}

TEST_CASE("the manifest selects DeepSeek's splits with tokenizer_pattern 1, and refuses other values by name",
          "[tokenizer][deepseek]") {
  CHECK(*tokenizer::pattern_for_config(json::parse(R"({"tokenizer_pattern": 1})")) == tokenizer::kDeepSeekPattern);
  CHECK(*tokenizer::pattern_for_config(json::parse(R"({"tokenizer_pattern": 0})")) == tokenizer::kKimiPattern);
  CHECK(*tokenizer::pattern_for_config(json::parse(R"({"tokenizer_pattern": 0, "tokenizer_han_split": false})")) ==
        tokenizer::kGlmPattern);
  CHECK_FALSE(tokenizer::kDeepSeekPattern == tokenizer::Pattern(tokenizer::kKimiPattern));
  auto bad = tokenizer::pattern_for_config(json::parse(R"({"tokenizer_pattern": 2})"));
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message ==
        "config.tokenizer_pattern: expected 0 (one cl100k-style pattern) or 1 (DeepSeek-V4.1's three splits), found 2");
  bad = tokenizer::pattern_for_config(json::parse(R"({"tokenizer_pattern": "deepseek"})"));
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "config.tokenizer_pattern: expected 0 (one cl100k-style pattern) or 1 (DeepSeek-V4.1's "
                               "three splits), found \"deepseek\"");
  // A broken split of a sequence is named by its place.
  const std::array<std::string_view, 2> broken = {R"(\p{N})", "(open"};
  auto pre = PreTokenizer::create(tokenizer::Pattern(broken));
  REQUIRE_FALSE(pre);
  CHECK(pre.error().message.starts_with("pre-tokenizer pattern (split 2 of 2) does not compile (U_REGEX_MISMATCHED_PAREN"));
}

// ---- A DeepSeek-kind tokenizer.json, built here: BOS/EOS/PAD at ids 0..2 of the BPE vocabulary
// (not byte-level text), byte b at id b + 3, merges from 259 on; specials <｜User｜> 300 and
// <｜Assistant｜> 301 appended. Expected ids are worked from those merges.
namespace {

// GPT-2's escape, written independently of the converter (as test_hf_tokenizer.cpp does).
std::string escape(std::string_view bytes) {
  auto printable = [](int x) { return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE; };
  std::string out;
  for (unsigned char b : bytes) {
    char32_t cp = b;
    if (!printable(b)) {
      int n = 0;
      for (int x = 0; x < b; ++x) n += printable(x) ? 0 : 1;
      cp = 256 + char32_t(n);
    }
    if (cp < 0x80) {
      out += char(cp);
    } else {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

const std::string kBos = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";  // <｜begin▁of▁sentence｜>
const std::string kEos = "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
const std::string kPad = "<\xEF\xBD\x9C\xE2\x96\x81pad\xE2\x96\x81\xEF\xBD\x9C>";
const std::string kUser = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>";
const std::string kAssistant = "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>";
const std::string kGu = "\xE8\x82\xA1";  // 股

json deepseek_tokenizer_json() {
  json vocab = json::object();
  vocab[kBos] = 0;
  vocab[kEos] = 1;
  vocab[kPad] = 2;
  for (int b = 0; b < 256; ++b) vocab[escape(std::string(1, char(b)))] = b + 3;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"},  // 259..262
      {",", "w"},                                           // 263
      {"\xE8", "\x82"}, {"\xE8\x82", "\xA1"}, {"A", kGu},   // 264..266: 股 and the cross-boundary A股
      {"1", "2"}, {"12", "3"}, {"3", "4"}};                 // 267..269
  json m = json::array();
  int id = 259;
  for (const auto& [a, b] : merges) {
    vocab[escape(a + b)] = id++;
    m.push_back(json::array({escape(a), escape(b)}));
  }
  json splits = json::array();
  for (const auto pattern : tokenizer::kDeepSeekSplits) {
    splits.push_back({{"type", "Split"}, {"pattern", {{"Regex", std::string(pattern)}}}, {"behavior", "Isolated"},
                      {"invert", false}});
  }
  splits.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
  json added = json::array();
  for (const auto& [aid, text] : std::vector<std::pair<int, std::string>>{
           {0, kBos}, {1, kEos}, {2, kPad}, {301, kAssistant}, {300, kUser}}) {
    added.push_back({{"id", aid}, {"content", text}, {"special", true}});
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", splits}}},
          {"model", {{"type", "BPE"}, {"byte_fallback", false}, {"vocab", vocab}, {"merges", m}}}};
}

void write(const std::filesystem::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

int byte_id(char c) { return int(static_cast<unsigned char>(c)) + 3; }

}  // namespace

TEST_CASE("a DeepSeek tokenizer.json converts: three splits found, specials inside the BPE table kept out of the "
          "rank file",
          "[tokenizer][deepseek][hf]") {
  auto hf = convert::convert_hf_tokenizer(deepseek_tokenizer_json().dump(), "tokenizer.json");
  INFO((hf ? std::string() : hf.error().message));
  REQUIRE(hf.has_value());
  CHECK(hf->tokenizer_pattern == tokenizer::kTokenizerPatternDeepSeek);
  CHECK(hf->han_split);
  CHECK(hf->n_inline_specials == 3);
  CHECK(hf->n_tokens == 256 + 11);
  REQUIRE(hf->added.size() == 5);
  CHECK(hf->added[0].id == 0);
  CHECK(hf->added[0].text == kBos);
  CHECK(hf->added[3].id == 300);
  CHECK(hf->added[3].text == kUser);
  // Byte 0 is the first line, at id 3; nothing at ids 0..2.
  CHECK(hf->rank_file.starts_with("AA== 3\nAQ== 4\n"));
  CHECK(hf->rank_file.find(" 0\n") == std::string::npos);
  CHECK(hf->rank_file.find(" 2\n") == std::string::npos);
  CHECK(hf->rank_file.ends_with("MzQ= 269\n"));  // "34"
  // The manifest keys the converter writes select the same splits again.
  json config = json::object();
  convert::add_pattern_keys(*hf, config);
  CHECK(config == json::parse(R"({"tokenizer_pattern": 1})"));
  CHECK(*tokenizer::pattern_for_config(config) == tokenizer::kDeepSeekPattern);
  // specials.json carries the non-ASCII markers as UTF-8.
  CHECK(convert::specials_json(hf->added).find("\"text\": \"" + kBos + "\"") != std::string::npos);
}

TEST_CASE("a DeepSeek-kind container tokenizes end to end: splits, BOS 0 from the config, UTF-8 specials",
          "[tokenizer][deepseek][hf]") {
  auto hf = convert::convert_hf_tokenizer(deepseek_tokenizer_json().dump(), "tokenizer.json");
  REQUIRE(hf.has_value());
  test::TempDir dir("ds-tok");
  write(dir.path() / "tokenizer.model", hf->rank_file);
  write(dir.path() / "specials.json", convert::specials_json(hf->added));
  write(dir.path() / "manifest.json",
        R"({"format_version": 0, "config": {"tokenizer_pattern": 1, "bos_token_id": 0, "eos_token_id": 1}})");
  auto tok = Tokenizer::load(dir.path());
  INFO((tok ? std::string() : tok.error().message));
  REQUIRE(tok.has_value());
  CHECK(tok->pre_tokenizer().patterns().size() == 3);
  CHECK(tok->bos() == 0);
  CHECK(tok->n_base() == 270);
  CHECK(tok->is_special(0));
  CHECK(tok->is_special(2));
  CHECK_FALSE(tok->is_special(3));

  CHECK(tok->encode("hello") == std::vector<int>{262});
  CHECK(tok->encode("hello,world") ==
        std::vector<int>{262, 263, byte_id('o'), byte_id('r'), byte_id('l'), byte_id('d')});
  // Split 2 isolates 股, so the cross-boundary token A股 (266) is unreachable here...
  CHECK(tok->encode("A" + kGu) == std::vector<int>{byte_id('A'), 265});
  // ...and reachable with GLM's single pattern over the same ranks.
  std::vector<Special> specials;
  for (const auto& a : hf->added) specials.push_back({a.id, a.text});
  auto glm = Tokenizer::from_ranks(hf->rank_file, specials, tokenizer::kGlmPattern);
  REQUIRE(glm.has_value());
  CHECK(glm->encode("A" + kGu) == std::vector<int>{266});
  // Digit runs of three: "1234" is 123|4, so the merge 3+4 never fires.
  CHECK(tok->encode("1234") == std::vector<int>{268, byte_id('4')});
  CHECK(tok->encode("34") == std::vector<int>{269});

  CHECK(tok->encode_markup(kBos + kUser + "hello" + kAssistant) == std::vector<int>{0, 300, 262, 301});
  // Plain mode: the marker is text, never its id.
  const auto plain = tok->encode(kUser);
  CHECK(std::find(plain.begin(), plain.end(), 300) == plain.end());
  CHECK(tok->decode(plain) == kUser);
  CHECK(tok->decode(std::vector<int>{0, 262, 1}) == kBos + "hello" + kEos);

  // specials.json written with JSON escapes for the same markers loads the same.
  write(dir.path() / "specials.json",
        R"([{"id": 0, "text": "<\uff5cbegin\u2581of\u2581sentence\uff5c>"}, {"id": 300, "text": "<\uff5cUser\uff5c>"}])");
  auto escaped = Tokenizer::load(dir.path());
  REQUIRE(escaped.has_value());
  CHECK(escaped->encode_markup(kBos + kUser + "hello") == std::vector<int>{0, 300, 262});
  CHECK(escaped->bos() == 0);
}

TEST_CASE("hazard: a DeepSeek-like tokenizer.json the engine would split differently is refused by name",
          "[tokenizer][deepseek][hf]") {
  json t = deepseek_tokenizer_json();
  auto& seq = t["pre_tokenizer"]["pretokenizers"];
  std::swap(seq[0], seq[1]);  // the CJK split before the digit split
  auto bad = convert::convert_hf_tokenizer(t.dump(), "tok.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message ==
        "tok.json: pre_tokenizer has 3 Split patterns; one Split with a Regex pattern, or DeepSeek-V4.1's three, is "
        "converted");

  t = deepseek_tokenizer_json();
  t["pre_tokenizer"]["pretokenizers"][2]["behavior"] = "MergedWithPrevious";
  bad = convert::convert_hf_tokenizer(t.dump(), "tok.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message ==
        "tok.json: pre_tokenizer Split 3 has behavior \"MergedWithPrevious\"; only \"Isolated\" is implemented");

  t = deepseek_tokenizer_json();
  t["pre_tokenizer"]["pretokenizers"][0]["invert"] = true;
  bad = convert::convert_hf_tokenizer(t.dump(), "tok.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "tok.json: pre_tokenizer Split 1 is inverted; only matches as pieces are implemented");

  t = deepseek_tokenizer_json();
  t["pre_tokenizer"]["pretokenizers"][1]["pattern"] = {{"String", "x"}};
  bad = convert::convert_hf_tokenizer(t.dump(), "tok.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message ==
        "tok.json: pre_tokenizer Split 2 has no Regex pattern ({\"String\":\"x\"}); only Regex Splits are converted");

  // A vocabulary entry outside the byte map that is not an added token (or is one under another
  // id) is still refused.
  t = deepseek_tokenizer_json();
  t["added_tokens"].erase(0);  // BOS no longer declared
  bad = convert::convert_hf_tokenizer(t.dump(), "tok.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message ==
        "tok.json: token " + json(kBos).dump() + " (id 0) has a character outside the GPT-2 byte map; not a byte-level BPE");
  t = deepseek_tokenizer_json();
  t["added_tokens"][0]["id"] = 5;  // a BOS added at id 5 while the vocabulary has it at 0
  bad = convert::convert_hf_tokenizer(t.dump(), "tok.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message ==
        "tok.json: token " + json(kBos).dump() + " (id 0) has a character outside the GPT-2 byte map; not a byte-level BPE");

  // A manifest's tokenizer_pattern of the wrong kind names the key and the file.
  auto hf = convert::convert_hf_tokenizer(deepseek_tokenizer_json().dump(), "tokenizer.json");
  REQUIRE(hf.has_value());
  test::TempDir dir("ds-tok-bad");
  write(dir.path() / "tokenizer.model", hf->rank_file);
  write(dir.path() / "manifest.json", R"({"format_version": 0, "config": {"tokenizer_pattern": 1.5}})");
  auto tok = Tokenizer::load(dir.path());
  REQUIRE_FALSE(tok);
  CHECK(tok.error().message == (dir.path() / "manifest.json").string() +
                                   ": config.tokenizer_pattern: expected 0 (one cl100k-style pattern) or 1 "
                                   "(DeepSeek-V4.1's three splits), found 1.5");
}

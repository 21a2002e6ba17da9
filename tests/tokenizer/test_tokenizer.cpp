#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "compute/tokenizer/tokenizer.hpp"
#include "shared/synth/synthetic_tokenizer.hpp"
#include "tests/tokenizer/test_support.hpp"

using waste::Tokenizer;

namespace {

std::filesystem::path temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("waste-tokenizer-test-" + name + "-" +
                                                              std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

const Tokenizer& synthetic() {
  static const Tokenizer tok = [] {
    const auto dir = temp_dir("synthetic");
    REQUIRE(waste::synth::write_synthetic_tokenizer(dir, 0).has_value());
    auto loaded = Tokenizer::load(dir);
    REQUIRE(loaded.has_value());
    std::filesystem::remove_all(dir);
    return std::move(*loaded);
  }();
  return tok;
}

// A small hand-made tokenizer: bytes, a few merges, ChatML-style specials.
Tokenizer small() {
  auto tok = Tokenizer::from_ranks(waste::test::rank_file({"he", "ll", "llo", "hello", " w", "or", " wor", "ld", " world"}),
                                   {{300, "<|im_end|>"}, {301, "<|im_start|>"}, {302, "<|im"}});
  REQUIRE(tok.has_value());
  return std::move(*tok);
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

TEST_CASE("Tokenizer encodes with whole-piece tokens and merges", "[tokenizer]") {
  const Tokenizer tok = small();
  // "hello" is a token; " world" is a token; "!" is a byte.
  CHECK(tok.encode("hello world!") == std::vector<int>{259, 264, '!'});
  // "Hello" is not: H e l l o -> [H][e][ll][o] -> [H][e][llo] (he needs h).
  CHECK(tok.encode("Hello") == std::vector<int>{'H', 'e', 258});
  CHECK(tok.vocab() == 303);
  CHECK(tok.n_base() == 265);
  CHECK(tok.bos() == 265);
  CHECK(tok.eos() == 267);
}

TEST_CASE("Plain mode never yields a special id, markup mode does", "[tokenizer]") {
  const Tokenizer tok = small();
  const std::string text = "hello<|im_end|> world";
  const auto plain = tok.encode(text);
  for (const int id : plain) CHECK_FALSE(tok.is_special(id));
  CHECK(tok.decode(plain) == text);
  // Markup: the text before the special is encoded on its own, then the id, then the rest.
  CHECK(tok.encode_markup(text) == std::vector<int>{259, 300, 264});
  // Earliest occurrence wins; at equal offsets the longest special ("<|im_start|>" over "<|im").
  CHECK(tok.encode_markup("<|im_start|>x<|im") == std::vector<int>{301, 'x', 302});
  CHECK(tok.encode_markup("<|im_end|>") == std::vector<int>{300});
  CHECK(tok.decode(tok.encode_markup(text)) == text);
}

TEST_CASE("decode maps ids back to bytes and specials to their text", "[tokenizer]") {
  const Tokenizer tok = small();
  const std::vector<int> ids{259, 300, 'x'};
  CHECK(tok.decode(ids) == "hello<|im_end|>x");
  CHECK(tok.decode_token(264) == " world");
  CHECK(tok.decode_token(300) == "<|im_end|>");
  CHECK(tok.decode_token(280).empty());  // a gap between base tokens and specials
  CHECK(tok.decode_token(-1).empty());
  CHECK(tok.decode_token(303).empty());
  CHECK_FALSE(tok.valid_id(280));
  CHECK(tok.valid_id(300));
  CHECK(tok.special_id("<|im_start|>") == 301);
  CHECK_FALSE(tok.special_id("<|nope|>").has_value());
}

TEST_CASE("decode(encode(x)) == x on random UTF-8", "[tokenizer]") {
  const Tokenizer& tok = synthetic();
  std::mt19937 rng(11);
  // Ranges chosen to hit every branch of the pattern: ASCII, Latin-1, Cyrillic, Han, Kana,
  // Hangul, combining marks, emoji, whitespace of all kinds.
  const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0x24F}, {0x300, 0x36F}, {0x400, 0x4FF}, {0x4E00, 0x9FFF},
      {0x3040, 0x30FF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1F64F}, {0x2000, 0x200A}, {0x660, 0x669}};
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 80);
    for (int i = 0; i < n; ++i) {
      const auto& [lo, hi] = ranges[rng() % ranges.size()];
      append_utf8(text, lo + static_cast<char32_t>(rng() % (hi - lo + 1)));
    }
    const auto ids = tok.encode(text);
    REQUIRE(tok.decode(ids) == text);
    REQUIRE(tok.decode(tok.encode_markup(text)) == text);
  }
}

TEST_CASE("decode(encode(x)) == x on arbitrary bytes, including ill-formed UTF-8", "[tokenizer]") {
  const Tokenizer& tok = synthetic();
  std::mt19937 rng(12);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text(1 + rng() % 64, '\0');
    for (char& c : text) c = static_cast<char>(rng() & 0xFF);
    REQUIRE(tok.decode(tok.encode(text)) == text);
  }
  // An ill-formed byte becomes its single-byte token.
  CHECK(tok.encode("\xFF") == std::vector<int>{0xFF});
  CHECK(tok.decode(tok.encode(std::string("a\0b", 3))) == std::string("a\0b", 3));
}

TEST_CASE("A megabyte of text encodes and round-trips", "[tokenizer]") {
  const Tokenizer& tok = synthetic();
  std::string text;
  std::size_t repeats = 0;
  const std::string line = "The quick brown fox, 12345 times: \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 "
                           "\xE4\xB8\x96\xE7\x95\x8C!  \n";
  while (text.size() < (1u << 20)) {
    text += line;
    ++repeats;
  }
  const std::string long_word(100000, 'x');  // one very long piece takes the heap merge loop
  text += long_word;
  const auto ids = tok.encode(text);
  // Pieces never cross a line end here, so the whole is the parts laid end to end.
  std::vector<int> expected;
  const auto line_ids = tok.encode(line);
  for (std::size_t i = 0; i < repeats; ++i) expected.insert(expected.end(), line_ids.begin(), line_ids.end());
  const auto word_ids = tok.encode(long_word);
  expected.insert(expected.end(), word_ids.begin(), word_ids.end());
  CHECK(ids == expected);
  CHECK(tok.decode(ids) == text);
}

TEST_CASE("Tokenizer load errors carry the file and the reason", "[tokenizer]") {
  const auto dir = temp_dir("errors");
  {
    std::ofstream(dir / "tokenizer.model") << "YQ== 0\n";
  }
  auto tok = Tokenizer::load(dir);
  REQUIRE_FALSE(tok.has_value());
  CHECK(tok.error().message == (dir / "tokenizer.model").string() + ": rank file: byte 0x00 has no token of its own");

  {
    std::ofstream(dir / "tokenizer.model") << waste::test::rank_file({"ab"});
    std::ofstream(dir / "specials.json") << R"([{"id": 256, "text": "<|x|>"}])";
  }
  tok = Tokenizer::load(dir);
  REQUIRE_FALSE(tok.has_value());
  CHECK(tok.error().message ==
        (dir / "tokenizer.model").string() + ": special '<|x|>' has id 256, which the rank file already uses");

  {
    std::ofstream(dir / "specials.json") << R"([{"id": 300, "text": "<|x|>"}, {"id": 301, "text": "<|x|>"}])";
  }
  tok = Tokenizer::load(dir);
  REQUIRE_FALSE(tok.has_value());
  CHECK(tok.error().message == (dir / "specials.json").string() + ": entry 1: text '<|x|>' repeats");

  {
    std::ofstream(dir / "specials.json") << R"({"id": 300})";
  }
  tok = Tokenizer::load(dir);
  REQUIRE_FALSE(tok.has_value());
  CHECK(tok.error().message == (dir / "specials.json").string() + ": expected an array of {\"id\", \"text\"}");

  std::filesystem::remove_all(dir / "specials.json");
  std::filesystem::remove_all(dir / "tokenizer.model");
  tok = Tokenizer::load(dir);
  REQUIRE_FALSE(tok.has_value());
  CHECK(tok.error().code == waste::Errc::io);
  CHECK(tok.error().message == (dir / "tokenizer.model").string() + ": cannot open");
  std::filesystem::remove_all(dir);
}

TEST_CASE("tiktoken.model is accepted when tokenizer.model is absent", "[tokenizer]") {
  const auto dir = temp_dir("tiktoken-name");
  std::ofstream(dir / "tiktoken.model") << waste::test::rank_file({"ab"});
  const auto tok = Tokenizer::load(dir);
  REQUIRE(tok.has_value());
  CHECK(tok->encode("abc") == std::vector<int>{256, 'c'});
  CHECK(tok->specials().empty());
  std::filesystem::remove_all(dir);
}

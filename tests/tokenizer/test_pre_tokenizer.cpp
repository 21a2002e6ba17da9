// Pieces of the Kimi pattern (reference §5.3), worked out by hand from the regex, one script or
// rule per case. The npm tiktoken comparison (tiktoken_equality) checks the same strings end to end.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "compute/tokenizer/pre_tokenizer.hpp"

using waste::tokenizer::PreTokenizer;

namespace {

std::vector<std::string> pieces(std::string_view pattern, std::string_view text) {
  auto pre = PreTokenizer::create(pattern);
  REQUIRE(pre.has_value());
  std::vector<std::string> out;
  for (const auto piece : pre->split(text)) out.emplace_back(piece);
  return out;
}

std::vector<std::string> kimi(std::string_view text) { return pieces(waste::tokenizer::kKimiPattern, text); }

using V = std::vector<std::string>;

}  // namespace

TEST_CASE("Kimi pattern: Latin words, case runs and camel case", "[tokenizer]") {
  CHECK(kimi("Hello world") == V{"Hello", " world"});
  // Upper* then lower+: a capital starts a new piece, unlike cl100k.
  CHECK(kimi("HelloWorld") == V{"Hello", "World"});
  // All caps cannot end in a lower-case letter, so branch 3 takes the whole run.
  CHECK(kimi("HELLO world") == V{"HELLO", " world"});
  CHECK(kimi("über straße") == V{"über", " straße"});
  // A combining mark (Mn) belongs to the word: e + U+0301.
  CHECK(kimi("cafe\xCC\x81s") == V{"cafe\xCC\x81s"});
}

TEST_CASE("Kimi pattern: contractions are case-insensitive and stick to the word", "[tokenizer]") {
  CHECK(kimi("I'm don't we've they'RE WE'LL you'D it's") ==
        V{"I'm", " don't", " we've", " they'RE", " WE'LL", " you'D", " it's"});
  CHECK(kimi("DON'T") == V{"DON'T"});
  // A lone contraction: the apostrophe is the optional leading non-letter.
  CHECK(kimi("'s") == V{"'s"});
  // Not a listed contraction: the apostrophe goes to the next word.
  CHECK(kimi("I'x") == V{"I", "'x"});
}

TEST_CASE("Kimi pattern: digits in groups of at most three", "[tokenizer]") {
  CHECK(kimi("12345") == V{"123", "45"});
  CHECK(kimi("3.14159") == V{"3", ".", "141", "59"});
  CHECK(kimi("abc123") == V{"abc", "123"});
  // Arabic-Indic digits are \p{N} too.
  CHECK(kimi("\xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6") == V{"\xD9\xA3\xD9\xA4\xD9\xA5", "\xD9\xA6"});
}

TEST_CASE("Kimi pattern: whitespace runs", "[tokenizer]") {
  // The last space of a run goes to the next word; \s+(?!\S) keeps the rest.
  CHECK(kimi("a  b") == V{"a", " ", " b"});
  CHECK(kimi("x    y") == V{"x", "   ", " y"});
  CHECK(kimi("a   ") == V{"a", "   "});
  CHECK(kimi("a\r\nb") == V{"a", "\r\n", "b"});
  // \s*[\r\n]+ ends at the last newline; the space after it joins the next word.
  CHECK(kimi("a \n\n b") == V{"a", " \n\n", " b"});
  CHECK(kimi("Hello\n\nWorld") == V{"Hello", "\n\n", "World"});
  // A tab is a valid leading non-letter for a word.
  CHECK(kimi("  \tfoo") == V{"  ", "\tfoo"});
}

TEST_CASE("Kimi pattern: punctuation", "[tokenizer]") {
  CHECK(kimi("Hello, world!!!\n") == V{"Hello", ",", " world", "!!!\n"});
  CHECK(kimi("say \"quoted\"") == V{"say", " \"", "quoted", "\""});
  CHECK(kimi("f(x) = y;") == V{"f", "(x", ")", " =", " y", ";"});
}

TEST_CASE("Kimi pattern: Han is split from other letters and takes no leading space", "[tokenizer]") {
  CHECK(kimi("我们的模型") == V{"我们的模型"});
  CHECK(kimi("中文English") == V{"中文", "English"});
  CHECK(kimi("Hello中文") == V{"Hello", "中文"});
  CHECK(kimi("a 中文") == V{"a", " ", "中文"});
  CHECK(kimi("你好，世界。") == V{"你好", "，", "世界", "。"});
}

TEST_CASE("Kimi pattern: Kana, Hangul, Cyrillic, Greek, Arabic, Hebrew", "[tokenizer]") {
  CHECK(kimi("こんにちは") == V{"こんにちは"});
  CHECK(kimi("日本語のテキスト") == V{"日本語", "のテキスト"});
  CHECK(kimi("コーヒー") == V{"コーヒー"});  // U+30FC is Lm
  CHECK(kimi("안녕하세요 세계") == V{"안녕하세요", " 세계"});
  CHECK(kimi("Привет мир") == V{"Привет", " мир"});
  CHECK(kimi("МОСКВА москва") == V{"МОСКВА", " москва"});
  CHECK(kimi("Γειά σου Κόσμε") == V{"Γειά", " σου", " Κόσμε"});
  CHECK(kimi("مرحبا بالعالم") == V{"مرحبا", " بالعالم"});
  CHECK(kimi("שלום עולם") == V{"שלום", " עולם"});
}

TEST_CASE("Kimi pattern: emoji are symbols, variation selectors marks", "[tokenizer]") {
  CHECK(kimi("I \xE2\x9D\xA4\xEF\xB8\x8F you \xF0\x9F\x98\x80!") ==
        V{"I", " \xE2\x9D\xA4\xEF\xB8\x8F", " you", " \xF0\x9F\x98\x80!"});
}

TEST_CASE("Kimi pattern: a very long word is one piece", "[tokenizer]") {
  const std::string word(5000, 'a');
  CHECK(kimi(word) == V{word});
  CHECK(kimi(" " + word + "!") == V{" " + word, "!"});
}

TEST_CASE("Ill-formed UTF-8 bytes are pieces of their own", "[tokenizer]") {
  CHECK(kimi("ab\xFF" "cd") == V{"ab", "\xFF", "cd"});
  // A truncated sequence: each byte alone, and the text before it matched as its own text.
  CHECK(kimi("a \xE4\xB8") == V{"a", " ", "\xE4", "\xB8"});
  // Overlong encoding of '/' and an encoded surrogate are ill-formed.
  CHECK(kimi("\xC0\xAF") == V{"\xC0", "\xAF"});
  CHECK(kimi("\xED\xA0\x80") == V{"\xED", "\xA0", "\x80"});
}

TEST_CASE("Patterns are data: cl100k_base and o200k_base split differently", "[tokenizer]") {
  using waste::tokenizer::kCl100kPattern;
  using waste::tokenizer::kO200kPattern;
  CHECK(pieces(kCl100kPattern, "HelloWorld 中文English") == V{"HelloWorld", " 中文English"});
  CHECK(pieces(kO200kPattern, "HelloWorld 中文English") == V{"Hello", "World", " 中文English"});
  // cl100k has the contraction as its own alternative.
  CHECK(pieces(kCl100kPattern, "don't") == V{"don", "'t"});
  CHECK(pieces(kO200kPattern, "don't") == V{"don't"});
  // o200k lets '/' follow the newlines after punctuation.
  CHECK(pieces(kO200kPattern, "a+\n/b") == V{"a", "+\n/", "b"});
  CHECK(pieces(kCl100kPattern, "a+\n/b") == V{"a", "+\n", "/b"});
  // \s is Unicode White_Space, which includes VT and NEL: \s+(?!\S) leaves the last one to the word.
  CHECK(pieces(kCl100kPattern, "\x0B\x0B" "b") == V{"\x0B", "\x0B" "b"});
  CHECK(pieces(kCl100kPattern, "\xC2\x85\xC2\x85" "b") == V{"\xC2\x85", "\xC2\x85" "b"});
}

TEST_CASE("A pattern that leaves gaps keeps the gap text as pieces", "[tokenizer]") {
  CHECK(pieces("[a-z]+", "ab12cd!") == V{"ab", "12", "cd", "!"});
}

TEST_CASE("A pattern ICU cannot compile is an argument error", "[tokenizer]") {
  const auto pre = PreTokenizer::create("(unclosed");
  REQUIRE_FALSE(pre.has_value());
  CHECK(pre.error().code == waste::Errc::argument);
  CHECK_THAT(pre.error().message, Catch::StartsWith("pre-tokenizer pattern does not compile (U_REGEX_MISMATCHED_PAREN"));
  CHECK(PreTokenizer::create("").error().message == "pre-tokenizer pattern is empty");
}

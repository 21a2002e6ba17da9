#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "compute/tokenizer/bpe.hpp"
#include "compute/tokenizer/rank_file.hpp"
#include "tests/tokenizer/test_support.hpp"

using waste::tokenizer::BytePairEncoder;
using waste::tokenizer::parse_rank_file;

namespace {

BytePairEncoder encoder(const std::vector<std::string>& merges) {
  auto entries = parse_rank_file(waste::test::rank_file(merges), "test");
  REQUIRE(entries.has_value());
  return BytePairEncoder(*entries);
}

std::vector<int> encode(const BytePairEncoder& bpe, std::string_view piece) {
  std::vector<int> ids;
  REQUIRE(bpe.encode_piece(piece, ids));
  return ids;
}

}  // namespace

TEST_CASE("base64 decoding follows the rank-file rules", "[tokenizer]") {
  using waste::tokenizer::decode_base64;
  CHECK(decode_base64("SGVsbG8=") == "Hello");
  CHECK(decode_base64("IGhlbGxv") == " hello");
  CHECK(decode_base64("4oCZ") == "\xE2\x80\x99");
  CHECK(decode_base64("SGVs\rbG8=") == "Hello");  // characters outside the alphabet are skipped
  CHECK(decode_base64("SGk=QUJD") == "Hi");       // '=' ends the input
}

TEST_CASE("Rank file errors name the line", "[tokenizer]") {
  CHECK(parse_rank_file("YQ== 0\nYg== x\n", "t.model").error().message ==
        "t.model: line 2: rank 'x' is not a non-negative integer");
  CHECK(parse_rank_file("YQ== 0\nYg== 0\n", "t.model").error().message == "t.model: line 2: rank 0 appears twice");
  CHECK(parse_rank_file("YQ== 0\nYQ== 1\n", "t.model").error().message ==
        "t.model: line 2: rank 1 repeats the bytes of line 1");
  CHECK(parse_rank_file("= 3\n", "t.model").error().message == "t.model: line 1: token for rank 3 decodes to no bytes");
  // Lines without a space are skipped; CRLF line ends are accepted.
  const auto ok = parse_rank_file("header\r\nYQ== 7\r\n", "t.model");
  REQUIRE(ok.has_value());
  REQUIRE(ok->size() == 1);
  CHECK((*ok)[0].bytes == "a");
  CHECK((*ok)[0].rank == 7);
}

TEST_CASE("BPE merges the lowest-ranked pair first", "[tokenizer]") {
  // ab before bc: "abc" -> [ab][c]; bc before ab: -> [a][bc].
  CHECK(encode(encoder({"ab", "bc"}), "abc") == std::vector<int>{256, 'c'});
  CHECK(encode(encoder({"bc", "ab"}), "abc") == std::vector<int>{'a', 256});
  // A merged part merges again when the longer string is a token: [ab][c][d] -> [abc][d].
  CHECK(encode(encoder({"ab", "bc", "abc"}), "abcd") == std::vector<int>{258, 'd'});
  // A whole-piece token wins even when the merge order would not reach it.
  CHECK(encode(encoder({"ab", "bc", "ac", "abc"}), "abc") == std::vector<int>{259});
}

TEST_CASE("BPE breaks rank ties leftmost", "[tokenizer]") {
  const auto bpe = encoder({"aa"});
  CHECK(encode(bpe, "aaa") == std::vector<int>{256, 'a'});
  CHECK(encode(bpe, "aaaa") == std::vector<int>{256, 256});
  CHECK(encode(bpe, "aaaaa") == std::vector<int>{256, 256, 'a'});
  // The heap loop used for long pieces keeps the same tie rule.
  std::vector<int> heap;
  REQUIRE(bpe.merge_heap("aaaaa", heap));
  CHECK(heap == std::vector<int>{256, 256, 'a'});
}

TEST_CASE("The quadratic and heap merge loops agree on random pieces", "[tokenizer]") {
  // Every string of length 2..4 over {a,b,c} is a token, ranks shuffled: many competing merges.
  std::vector<std::string> merges;
  std::vector<std::string> shorter = {"a", "b", "c"};
  for (int len = 2; len <= 4; ++len) {
    std::vector<std::string> longer;
    for (const auto& s : shorter) {
      for (const char c : std::string("abc")) longer.push_back(s + c);
    }
    merges.insert(merges.end(), longer.begin(), longer.end());
    shorter = std::move(longer);
  }
  std::mt19937 rng(7);
  std::shuffle(merges.begin(), merges.end(), rng);
  REQUIRE(merges.size() == 9 + 27 + 81);
  const auto bpe = encoder(merges);
  for (int trial = 0; trial < 300; ++trial) {
    std::string piece(1 + rng() % 300, 'a');
    for (char& c : piece) c = "abcx"[rng() % 4];
    std::vector<int> quadratic, heap;
    REQUIRE(bpe.merge_quadratic(piece, quadratic));
    REQUIRE(bpe.merge_heap(piece, heap));
    REQUIRE(quadratic == heap);
  }
}

TEST_CASE("BPE reports a piece it cannot encode", "[tokenizer]") {
  auto entries = parse_rank_file("YQ== 0\n", "t");  // only "a"
  REQUIRE(entries.has_value());
  const BytePairEncoder bpe(*entries);
  std::vector<int> ids{42};
  CHECK_FALSE(bpe.encode_piece("ab", ids));
  CHECK(ids == std::vector<int>{42});  // nothing half-emitted
}

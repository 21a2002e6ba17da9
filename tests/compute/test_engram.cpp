// DeepSeek-V4.1's Engram addressing (compute/engram): primality, the conversion-time layout,
// engram.json / engram-tokmap.bin parsing with exact errors, and row ids worked by hand. The
// numpy/sympy oracle (tests/reference/engram_oracle.py) checks the same code bit for bit on
// random sequences; these are the facts and hazards it does not cover.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/engram/engram_json.hpp"
#include "compute/engram/engram_layout.hpp"
#include "compute/engram/ngram_hash.hpp"
#include "compute/engram/primes.hpp"
#include "compute/engram/token_map.hpp"

using namespace waste;
using namespace waste::engram;
using nlohmann::json;

namespace {

bool trial_division_prime(std::uint64_t n) {
  if (n < 2) return false;
  for (std::uint64_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) return false;
  }
  return true;
}

EngramParams released() {
  EngramParams p;
  p.layer_ids = {1, 14};
  p.max_ngram_size = 4;
  p.n_heads = 8;
  p.head_dim = 256;
  p.engram_vocab_size = 16'000'000;
  p.compressed_vocab_size = 99'092;
  p.pad_id = 2;
  p.num_embeddings = {384'006'168, 384'016'682};
  return p;
}

// A layout small enough to hash by hand: 3-grams, one head, primes 11 (bigrams) and 13
// (trigrams), multipliers 3, 5, 7, pad 1, compressed ids 0..9.
const char* kHandLayout = R"({"compressed_vocab_size": 10, "pad_id": 1, "max_ngram_size": 3, "n_heads": 1,
  "head_dim": 4, "layers": [{"layer": 1, "multipliers": [3, 5, 7], "primes": [[11], [13]], "offsets": [0, 11]}]})";

std::string parse_error(const json& doc) {
  auto r = parse_engram_json(doc.dump(), "engram.json");
  REQUIRE_FALSE(r);
  return r.error().message;
}

}  // namespace

TEST_CASE("engram: is_prime agrees with trial division, and with known 64-bit primes and pseudoprimes",
          "[engram]") {
  for (std::uint64_t n = 0; n < 20000; ++n) REQUIRE(is_prime(n) == trial_division_prime(n));
  for (std::uint64_t n = 15'999'000; n < 16'001'000; ++n) REQUIRE(is_prime(n) == trial_division_prime(n));
  CHECK(is_prime((std::uint64_t{1} << 61) - 1));     // Mersenne prime M61
  CHECK(is_prime(18'446'744'073'709'551'557ull));     // the largest prime below 2^64
  CHECK_FALSE(is_prime(561));                         // Carmichael
  CHECK_FALSE(is_prime(3'215'031'751ull));            // strong pseudoprime to bases 2, 3, 5, 7
  CHECK_FALSE(is_prime(3'825'123'056'546'413'051ull));  // strong pseudoprime to bases 2..23
  CHECK_FALSE(is_prime(18'446'744'073'709'551'615ull));
}

TEST_CASE("engram: the released sizes give 24 columns per layer whose primes sum to engram_num_embeddings",
          "[engram]") {
  auto layout = derive_engram_layout(released());
  INFO((layout ? std::string() : layout.error().message));
  REQUIRE(layout.has_value());
  CHECK(layout->columns() == 24);
  REQUIRE(layout->layers.size() == 2);
  CHECK(layout->layers[0].rows() == 384'006'168u);
  CHECK(layout->layers[1].rows() == 384'016'682u);
  // The first bucket is the first prime from engram_vocab_size up; all are odd, multipliers too.
  CHECK(layout->layers[0].primes[0] == 16'000'057u);
  for (std::uint64_t n = 16'000'000; n < 16'000'057; ++n) REQUIRE_FALSE(trial_division_prime(n));
  for (const auto& layer : layout->layers) {
    REQUIRE(layer.multipliers.size() == 4);
    for (const auto m : layer.multipliers) CHECK(m % 2 == 1);
  }
  auto wrong = released();
  wrong.num_embeddings[1] += 1;
  auto bad = derive_engram_layout(wrong);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "engram layout: engram layer 14: the bucket primes sum to 384016682 rows and "
                               "engram_num_embeddings states 384016683");
  wrong = released();
  wrong.layer_ids = {1, 1};
  bad = derive_engram_layout(wrong);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "engram layout: engram_layer_ids repeats 1");
  wrong = released();
  wrong.pad_id = 99'092;
  bad = derive_engram_layout(wrong);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "engram layout: pad id 99092 is outside the compressed vocabulary 0..99091");
}

TEST_CASE("engram: engram.json round trip, and hazards refused with the key named", "[engram]") {
  auto layout = derive_engram_layout(released());
  REQUIRE(layout.has_value());
  const std::string text = engram_json_text(*layout);
  auto back = parse_engram_json(text, "engram.json");
  INFO((back ? std::string() : back.error().message));
  REQUIRE(back.has_value());
  CHECK(engram_json_text(*back) == text);
  CHECK(back->layers[1].multipliers == layout->layers[1].multipliers);

  const json good = json::parse(text);
  json d = good;
  d.erase("pad_id");
  CHECK(parse_error(d) == "engram.json: pad_id: missing");
  d = good;
  d["max_ngram_size"] = "4";
  CHECK(parse_error(d) == "engram.json: max_ngram_size: expected an integer, found \"4\"");
  d = good;
  d["layers"][0]["multipliers"][2] = 1.5e13;  // a double would corrupt the multiplier
  CHECK(parse_error(d) == "engram.json: layers[0].multipliers[2]: expected an integer, found 15000000000000.0");
  d = good;
  d["layers"][1]["multipliers"][0] = 4;
  CHECK(parse_error(d) == "engram.json: layers[1].multipliers[0]: 4 is even");
  d = good;
  d["layers"][0]["multipliers"][1] = std::int64_t{1} << 48;  // id * multiplier would overflow int64
  CHECK(parse_error(d) == "engram.json: layers[0].multipliers[1]: 281474976710656 is above 93079815895033");
  d = good;
  d["layers"][0]["primes"][1][3] = 16'000'058;
  CHECK(parse_error(d) == "engram.json: layers[0].primes[1][3]: 16000058 is not a prime");
  d = good;
  d["layers"][1]["primes"][0][0] = good["layers"][0]["primes"][0][0];
  CHECK(parse_error(d) == "engram.json: layers[1].primes[0][0]: 16000057 is used twice (bucket ranges must be "
                          "disjoint)");
  d = good;
  d["layers"][0]["primes"][2].erase(7);
  CHECK(parse_error(d) == "engram.json: layers[0].primes[2]: expected an array of n_heads (8) primes");
  d = good;
  d["layers"][0]["offsets"][5] = 0;
  CHECK(parse_error(d).starts_with("engram.json: layers[0].offsets[5]: 0 is not the sum of the primes before it ("));
  d = good;
  d["layers"][0]["offsets"].erase(23);
  CHECK(parse_error(d) == "engram.json: layers[0].offsets: 23 entries, expected 24");
  d = good;
  d["layers"][1]["layer"] = 1;
  CHECK(parse_error(d) == "engram.json: layers[1].layer: layer 1 appears twice");
  d = good;
  d["pad_id"] = 99'092;
  CHECK(parse_error(d) == "engram.json: pad_id: 99092 is above 99091");
  d = good;
  d["layers"] = json::array();
  CHECK(parse_error(d) == "engram.json: layers: expected a non-empty array");
  d = good;
  d["n_heads"] = 0;
  CHECK(parse_error(d) == "engram.json: n_heads: 0 is below 1");
  auto junk = parse_engram_json("[1]", "engram.json");
  REQUIRE_FALSE(junk);
  CHECK(junk.error().message == "engram.json: not a JSON object");
}

TEST_CASE("engram: the token map file is whole int32 ids inside the compressed vocabulary", "[engram]") {
  const std::vector<std::int32_t> map = {0, 9, 3, 3, 1};
  const std::string bytes = token_map_bytes(map);
  CHECK(bytes.size() == 20);
  CHECK(bytes.substr(4, 4) == std::string("\x09\x00\x00\x00", 4));
  auto back = parse_token_map(bytes, 10, "engram-tokmap.bin");
  REQUIRE(back.has_value());
  CHECK(*back == map);
  auto bad = parse_token_map(bytes.substr(0, 7), 10, "engram-tokmap.bin");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "engram-tokmap.bin: 7 bytes, not a non-empty whole number of int32 ids");
  bad = parse_token_map(bytes, 9, "engram-tokmap.bin");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "engram-tokmap.bin: token 1 maps to 9, outside the compressed vocabulary 0..8");
  bad = parse_token_map(std::string("\xFF\xFF\xFF\xFF", 4), 10, "engram-tokmap.bin");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "engram-tokmap.bin: token 0 maps to -1, outside the compressed vocabulary 0..9");
}

TEST_CASE("engram: row ids worked by hand, the look-back stopping at the sequence start and at image tokens",
          "[engram]") {
  auto layout = parse_engram_json(kHandLayout, "engram.json");
  INFO((layout ? std::string() : layout.error().message));
  REQUIRE(layout.has_value());
  EngramTables tables{*layout, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}};
  const std::vector<std::int32_t> tokens = {4, 2, 9};
  // t0: ids 4, pad, pad: 12 ^ 5 = 9 -> 9 % 11 = 9; 9 ^ 7 = 14 -> 14 % 13 + 11 = 12.
  // t1: ids 2, 4, pad: 6 ^ 20 = 18 -> 7; 18 ^ 7 = 21 -> 8 + 11 = 19.
  // t2: ids 9, 2, 4: 27 ^ 10 = 17 -> 6; 17 ^ 28 = 13 -> 0 + 11 = 11.
  NgramHistory history(3);
  auto rows = sequence_row_ids(tables, tokens, {}, history);
  REQUIRE(rows.has_value());
  CHECK(*rows == std::vector<std::uint64_t>{9, 12, 7, 19, 6, 11});
  CHECK(std::vector<std::int32_t>(history.recent().begin(), history.recent().end()) == std::vector<std::int32_t>{9, 2});

  // t1 an image token: itself and everything older is pad (1, 1, 1): 3 ^ 5 = 6 -> 6; 6 ^ 7 = 1 -> 12.
  // t2: 9, then the dead token stops the look-back, so the live 4 behind it is pad too:
  // 27 ^ 5 = 30 -> 8; 30 ^ 7 = 25 -> 12 + 11 = 23.
  history.reset();
  const std::vector<std::uint8_t> dead = {0, 1, 0};
  rows = sequence_row_ids(tables, tokens, dead, history);
  REQUIRE(rows.has_value());
  CHECK(*rows == std::vector<std::uint64_t>{9, 12, 6, 12, 8, 23});

  // One token at a time with the history carried gives the same rows as the whole run.
  history.reset();
  std::vector<std::uint64_t> stepped;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    auto one = sequence_row_ids(tables, std::span(tokens).subspan(t, 1), std::span(dead).subspan(t, 1), history);
    REQUIRE(one.has_value());
    stepped.insert(stepped.end(), one->begin(), one->end());
  }
  CHECK(stepped == std::vector<std::uint64_t>{9, 12, 6, 12, 8, 23});
}

TEST_CASE("hazard: engram row ids refuse tokens outside the map and mismatched flags or history", "[engram]") {
  auto layout = parse_engram_json(kHandLayout, "engram.json");
  REQUIRE(layout.has_value());
  EngramTables tables{*layout, {0, 1, 2, 3, 4}};
  NgramHistory history(3);
  const std::vector<std::int32_t> tokens = {1, 5};
  auto bad = sequence_row_ids(tables, tokens, {}, history);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "engram: token 1 has id 5, outside the compressed token map's 5 ids");
  const std::vector<std::uint8_t> one_flag = {0};
  bad = sequence_row_ids(tables, tokens, one_flag, history);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "engram: 1 image flags for 2 tokens");
  NgramHistory long_history(5);
  bad = sequence_row_ids(tables, std::vector<std::int32_t>{1}, {}, long_history);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "engram: the history holds 4 tokens, the layout looks back 2");
  auto restored = history.restore(std::vector<std::int32_t>{1});
  REQUIRE_FALSE(restored);
  CHECK(restored.error().message == "engram history: 1 entries, expected 2");
  restored = history.restore(std::vector<std::int32_t>{3, -2});
  REQUIRE_FALSE(restored);
  CHECK(restored.error().message == "engram history: entry -2 is below -1");
}

TEST_CASE("engram: the compressed token map's normalization, worked by hand", "[engram]") {
  CHECK(engram_normalize(" The") == "the");
  CHECK(engram_normalize("CAFE\xCC\x81") == "cafe");                 // the accent is a mark: removed
  CHECK(engram_normalize("\xEF\xBC\xB4\xEF\xBC\xA8\xEF\xBC\xA5") == "the");  // fullwidth THE (NFKC)
  CHECK(engram_normalize("  hello\tworld\r\n") == "hello world");
  CHECK(engram_normalize(" ") == " ");                                // a lone space survives the trim
  CHECK(engram_normalize("\xE3\x80\x80") == " ");                    // so does U+3000 (NFKC: a space)
  CHECK(engram_normalize(" \n ") == " ");
  CHECK(engram_normalize("\xC4\xB0") == "i");                         // dotted I: I + U+0307, mark removed
  CHECK(engram_normalize("\xCC\x81").empty());                        // a lone mark normalizes to nothing

  // Ids in order of first appearance; the lone mark keys by its raw text, partial UTF-8 and
  // U+FFFD by the spelling, in the same key space as the texts (as the reference's one dict):
  // the text "a" meets the spelling "a".
  const std::vector<TokenText> vocab = {{"the", "the"},  {" THE", "\xC4\xA0THE"}, {"\xCC\x81", "x"},
                                        {"\xE8", "a"},   {"\xE8\x82", "b"},        {"\xEF\xBF\xBD", "c"},
                                        {"a", "z"},       {"\xE8", "a"}};
  auto map = derive_compressed_token_map(vocab);
  REQUIRE(map.has_value());
  CHECK(map->map == std::vector<std::int32_t>{0, 0, 1, 2, 3, 4, 2, 2});
  CHECK(map->size == 5);
  auto empty = derive_compressed_token_map({});
  REQUIRE_FALSE(empty);
  CHECK(empty.error().message == "compressed token map: the vocabulary is empty");
}

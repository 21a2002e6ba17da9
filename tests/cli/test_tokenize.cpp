// waste tokenize / detokenize against the Tokenizer API on a synthetic container with a real
// small tokenizer.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "compute/tokenizer/tokenizer.hpp"

namespace waste {
namespace {

using test::run_waste;
using test::tokenizer_container;

std::string ids_line(const std::vector<int>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s + "\n";
}

const std::string kText = "Hello world <|open|>x, the naïve café 42!";

}  // namespace

TEST_CASE("waste tokenize prints the Tokenizer API's ids, plain and markup", "[cli][tokenize]") {
  const auto& model = tokenizer_container();
  auto tok = Tokenizer::load(model);
  REQUIRE(tok);
  const std::vector<int> plain = tok->encode(kText);
  const std::vector<int> markup = tok->encode_markup(kText);
  const int open_id = *tok->special_id("<|open|>");
  // The two modes really differ on this text: only markup turns <|open|> into its id.
  CHECK(std::find(plain.begin(), plain.end(), open_id) == plain.end());
  CHECK(std::find(markup.begin(), markup.end(), open_id) != markup.end());

  auto ran = run_waste({"tokenize", model.string(), kText});
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  CHECK(ran.out == ids_line(plain));

  ran = run_waste({"tokenize", model.string(), "--markup", kText});
  REQUIRE(ran.rc == 0);
  CHECK(ran.out == ids_line(markup));

  test::ScratchDir dir;
  test::write_text(dir.path() / "t.txt", kText);
  ran = run_waste({"tokenize", model.string(), "--file", (dir.path() / "t.txt").string()});
  REQUIRE(ran.rc == 0);
  CHECK(ran.out == ids_line(plain));
}

TEST_CASE("waste tokenize --json gives ids and their pieces", "[cli][tokenize]") {
  const auto& model = tokenizer_container();
  auto tok = Tokenizer::load(model);
  REQUIRE(tok);
  const std::string text = "plain ascii text, pieces round trip";
  auto ran = run_waste({"tokenize", model.string(), "--json", text});
  REQUIRE(ran.rc == 0);
  const auto doc = nlohmann::json::parse(ran.out);
  CHECK(doc["ids"].get<std::vector<int>>() == tok->encode(text));
  CHECK(doc["count"].get<std::size_t>() == doc["ids"].size());
  std::string joined;
  for (const auto& piece : doc["pieces"]) joined += piece.get<std::string>();
  CHECK(joined == text);
  REQUIRE(doc["pieces"].size() == doc["ids"].size());
  for (std::size_t i = 0; i < doc["ids"].size(); ++i) {
    CHECK(doc["pieces"][i].get<std::string>() == tok->decode_token(doc["ids"][i].get<int>()));
  }
}

TEST_CASE("waste detokenize round-trips tokenize and rejects unknown ids", "[cli][tokenize]") {
  const auto& model = tokenizer_container();
  auto tok = Tokenizer::load(model);
  REQUIRE(tok);
  const std::vector<int> ids = tok->encode_markup(kText);
  std::string comma;
  for (std::size_t i = 0; i < ids.size(); ++i) comma += (i ? "," : "") + std::to_string(ids[i]);

  auto ran = run_waste({"detokenize", model.string(), comma});
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  CHECK(ran.out == kText + "\n");

  ran = run_waste({"detokenize", model.string(), "--file", "-"}, ids_line(ids));
  REQUIRE(ran.rc == 0);
  CHECK(ran.out == kText + "\n");

  const int vocab = tok->vocab();
  ran = run_waste({"detokenize", model.string(), "5," + std::to_string(vocab)});
  CHECK(ran.rc == 1);
  CHECK(ran.out.empty());
  CHECK(ran.err == "waste detokenize: token id " + std::to_string(vocab) + " at index 1 is not in the vocabulary (" +
                       std::to_string(vocab) + " tokens)\n");

  ran = run_waste({"detokenize", model.string(), "5,x7"});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste detokenize: token id 'x7' is not a non-negative integer\n");
}

}  // namespace waste

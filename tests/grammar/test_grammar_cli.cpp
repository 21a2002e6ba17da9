// waste run --json-schema / --grammar: the constrained output, and the errors that name the file
// and the keyword or line.
#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_support.hpp"

namespace waste::test {

TEST_CASE("waste run --grammar: the output is a complete match and the run ends with it", "[grammar][cli]") {
  ScratchDir dir;
  const fs::path g = dir.path() / "yesno.gbnf";
  write_text(g, "# one word\nroot ::= \"yes\" | \"no\" | \"maybe \" [0-9]{2}\n");
  for (int seed = 1; seed <= 6; ++seed) {
    const Ran ran = run_waste({"run", tokenizer_container().string(), "Answer:", "--in-process", "--grammar", g.string(),
                               "--temp", "1", "--seed", std::to_string(seed), "-n", "50", "-q"});
    INFO(ran.err);
    REQUIRE(ran.rc == 0);
    const bool ok = ran.out == "yes\n" || ran.out == "no\n" ||
                    (ran.out.size() == 9 && ran.out.rfind("maybe ", 0) == 0 && std::isdigit(static_cast<unsigned char>(ran.out[6])) &&
                     std::isdigit(static_cast<unsigned char>(ran.out[7])) && ran.out[8] == '\n');
    INFO(ran.out);
    CHECK(ok);
  }
}

TEST_CASE("waste run --json-schema --json: text parses, grammar block reports a complete match", "[grammar][cli]") {
  ScratchDir dir;
  const fs::path s = dir.path() / "s.json";
  write_text(s, R"({"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":3},"c":{"enum":["r","g"]}},"required":["n","c"],"additionalProperties":false})");
  const Ran ran = run_waste({"run", tokenizer_container().string(), "JSON:", "--in-process", "--json-schema", s.string(),
                             "--temp", "1", "--seed", "9", "-n", "100", "--json"});
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  const auto doc = nlohmann::json::parse(ran.out);
  CHECK(doc["grammar"]["complete"] == true);
  CHECK(doc["grammar"]["masks"].get<int>() >= 1);
  const auto v = nlohmann::json::parse(doc["text"].get<std::string>());
  CHECK(v.size() == 2);
  CHECK(v["n"].get<int>() >= 1);
  CHECK(v["n"].get<int>() <= 3);
  CHECK((v["c"] == "r" || v["c"] == "g"));
}

TEST_CASE("waste run: a schema or grammar file that cannot be used is an error naming the file", "[grammar][cli]") {
  ScratchDir dir;
  const std::string model = tokenizer_container().string();
  const fs::path fmt = dir.path() / "fmt.json";
  write_text(fmt, R"({"type":"object","properties":{"when":{"type":"string","format":"date"}}})");
  Ran ran = run_waste({"run", model, "x", "--in-process", "--json-schema", fmt.string()});
  CHECK(ran.rc != 0);
  CHECK(ran.err == "waste run: " + fmt.string() + ": unsupported JSON Schema keyword 'format' at /properties/when\n");

  const fs::path broken = dir.path() / "broken.json";
  write_text(broken, "{\"type\": ");
  ran = run_waste({"run", model, "x", "--in-process", "--json-schema", broken.string()});
  CHECK(ran.rc != 0);
  CHECK(ran.err.rfind("waste run: " + broken.string() + ": not valid JSON: ", 0) == 0);

  // Hazard: a number beyond double's range throws out_of_range, not parse_error.
  write_text(broken, R"({"type": "integer", "maximum": 1e999})");
  ran = run_waste({"run", model, "x", "--in-process", "--json-schema", broken.string()});
  CHECK(ran.rc != 0);
  CHECK(ran.err == "waste run: " + broken.string() +
                       ": not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e999'\n");

  const fs::path gbnf = dir.path() / "bad.gbnf";
  write_text(gbnf, "root ::= item\n\nitem ::= [a-z] oops\n");
  ran = run_waste({"run", model, "x", "--in-process", "--grammar", gbnf.string()});
  CHECK(ran.rc != 0);
  CHECK(ran.err == "waste run: " + gbnf.string() + ": grammar line 3, column 16: undefined rule 'oops'\n");

  ran = run_waste({"run", model, "--ids", "1,2", "--in-process", "--grammar", gbnf.string()});
  CHECK(ran.err == "waste run: --json-schema and --grammar need a prompt text (text mode), not --ids\n");
  ran = run_waste({"run", model, "x", "--in-process", "--grammar", gbnf.string(), "--json-schema", fmt.string()});
  CHECK(ran.err == "waste run: give either --json-schema or --grammar (not both)\n");
  ran = run_waste({"run", model, "x", "--in-process", "--grammar", (dir.path() / "missing.gbnf").string()});
  CHECK(ran.rc != 0);
  CHECK(ran.err.find("missing.gbnf") != std::string::npos);
}

}  // namespace waste::test

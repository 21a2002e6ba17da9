// waste bench --positions: decode from restored snapshots at chosen context positions. The
// timings are not checked (no timed assertions); what is checked is that a restored snapshot
// decodes exactly what a fresh run of the same ids decodes, every round alike, and the errors.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "shared/container/manifest.hpp"

namespace waste {
namespace {

using nlohmann::json;

// The bench prompt's id pattern (cli/bench/long_context.cpp), as a --ids list.
std::string pattern_ids(int n, int vocab) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i) out += ",";
    out += std::to_string((std::uint64_t(i) * 7919u + 13u) % std::uint64_t(vocab - 16));
  }
  return out;
}

std::vector<int> run_tokens(const std::string& model, const std::string& ids, int n) {
  return test::run_waste_json({"run", model, "--in-process", "--threads", "2", "--ids", ids, "-n", std::to_string(n),
                               "--ignore-eos", "--json"})["tokens"]
      .get<std::vector<int>>();
}

TEST_CASE("waste bench --positions: each position decodes what a fresh run of its ids decodes, every round", "[cli][bench]") {
  const auto model = test::tokenizer_container();
  auto manifest = Manifest::parse(test::slurp(model / "manifest.json"));
  REQUIRE(manifest);
  const int vocab = manifest->config.vocab;
  for (const char* fill : {"prefill", "replicate"}) {
    INFO(fill);
    // With replicate, positions within the prompt (8) are fed for real: 5 and 9 must equal runs.
    const json doc = test::run_waste_json({"bench", model.string(), "--threads", "2", "--in-process", "--compute-only",
                                           "--positions", "5,9,30", "--context-fill", fill, "--prompt-tokens", "8",
                                           "-n", "3", "--rounds", "2", "--json"});
    CHECK(doc["fill"] == fill);
    REQUIRE(doc["positions"].size() == 3);
    for (const json& p : doc["positions"]) {
      const int position = p["position"].get<int>();
      INFO("position " << position);
      CHECK(p["rounds_agree"].get<bool>());
      CHECK(p["rounds_ms_per_token"].size() == 2);
      CHECK(p["ms_per_token"].get<double>() > 0);
      CHECK(p["attn_mla_ms_per_token"].get<double>() > 0);  // tiny has MLA layers
      const auto tokens = p["tokens"].get<std::vector<int>>();
      CHECK(tokens.size() == 3);
      // A fresh run fed ids 0..position-1 then decoding: the same tokens, unless the position is
      // past a replicate fill's real prefix (its cache rows are copies, not those ids).
      if (std::string(fill) == "prefill" || position <= 9) {
        CHECK(tokens == run_tokens(model.string(), pattern_ids(position, vocab), 3));
      }
    }
  }
}

TEST_CASE("waste bench --positions: bad lists and positions past the context are refused by name", "[cli][bench]") {
  const auto model = test::tokenizer_container();
  auto bad = test::run_waste({"bench", model.string(), "--in-process", "--positions", "64,x", "-n", "2"});
  CHECK(bad.rc != 0);
  CHECK(bad.err.find("--positions: 'x' is not a position of at least 2") != std::string::npos);
  auto one = test::run_waste({"bench", model.string(), "--in-process", "--positions", "1", "-n", "2"});
  CHECK(one.rc != 0);
  CHECK(one.err.find("--positions: '1' is not a position of at least 2") != std::string::npos);
  auto past = test::run_waste({"bench", model.string(), "--in-process", "--ctx", "128", "--positions", "64,127", "-n", "2"});
  CHECK(past.rc != 0);
  CHECK(past.err.find("--positions: decoding 2 tokens from position 127 does not fit a context of 128 (--ctx)") !=
        std::string::npos);
}

}  // namespace
}  // namespace waste

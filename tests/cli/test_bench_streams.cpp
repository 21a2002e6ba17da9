// waste bench --streams: several sequences decoded in lockstep through the engine's batch feed. No
// timing is checked; what is checked is that every stream decodes what a fresh run of its prompt
// decodes alone (batched bits are a sequence's own), and the errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "shared/container/manifest.hpp"

namespace waste {
namespace {

using nlohmann::json;

// Stream i's prompt (cli/bench/streams.cpp): the bench prompt ids rotated left by 7 i.
std::string stream_ids(int n, int vocab, int stream) {
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((std::uint64_t(i) * 7919u + 13u) % std::uint64_t(vocab - 16));
  std::rotate(ids.begin(), ids.begin() + (std::size_t(stream) * 7u) % ids.size(), ids.end());
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out;
}

TEST_CASE("waste bench --streams: every stream of a batch decodes what its prompt decodes alone", "[cli][bench]") {
  const auto model = test::tokenizer_container();
  auto manifest = Manifest::parse(test::slurp(model / "manifest.json"));
  REQUIRE(manifest);
  const int vocab = manifest->config.vocab;
  const json doc = test::run_waste_json({"bench", model.string(), "--threads", "2", "--in-process", "--compute-only",
                                         "--streams", "1,3", "--prompt-tokens", "9", "-n", "4", "--json"});
  CHECK(doc["prompt_tokens"] == 9);
  REQUIRE(doc["streams"].size() == 2);
  for (const json& run : doc["streams"]) {
    const int n = run["streams"].get<int>();
    INFO(n << " streams");
    CHECK(run["passes"] == 4);
    CHECK(run["aggregate_tokens_per_second"].get<double>() > 0);
    REQUIRE(run["tokens"].size() == std::size_t(n));
    for (int i = 0; i < n; ++i) {
      INFO("stream " << i);
      const auto alone = test::run_waste_json({"run", model.string(), "--in-process", "--threads", "2", "--ids",
                                               stream_ids(9, vocab, i), "-n", "4", "--ignore-eos", "--json"});
      CHECK(run["tokens"][std::size_t(i)].get<std::vector<int>>() == alone["tokens"].get<std::vector<int>>());
    }
  }
}

TEST_CASE("waste bench --streams: the cache is warm before the first timed count", "[cli][bench]") {
  // Through the cache (no --compute-only): an untimed run of the largest count reads every expert
  // the timed counts route, so none of them times a first read (1 stream used to time them all).
  // A 2-token prompt leaves most of the tiny model's experts to the decode passes.
  const auto model = test::tokenizer_container();
  const json doc = test::run_waste_json({"bench", model.string(), "--threads", "2", "--in-process", "--streams", "1,3",
                                         "--prompt-tokens", "2", "-n", "4", "--json"});
  REQUIRE(doc["streams"].size() == 2);
  for (const json& run : doc["streams"]) {
    INFO(run["streams"].get<int>() << " streams");
    CHECK(run["expert_misses"].get<std::uint64_t>() == 0);
  }
}

TEST_CASE("waste bench --streams: bad counts are refused by name", "[cli][bench]") {
  const auto model = test::tokenizer_container();
  auto bad = test::run_waste({"bench", model.string(), "--in-process", "--streams", "2,x", "-n", "2"});
  CHECK(bad.rc != 0);
  CHECK(bad.err.find("--streams: 'x' is not a stream count from 1 to 64") != std::string::npos);
  auto zero = test::run_waste({"bench", model.string(), "--in-process", "--streams", "0", "-n", "2"});
  CHECK(zero.rc != 0);
  CHECK(zero.err.find("--streams: '0' is not a stream count from 1 to 64") != std::string::npos);
  auto none = test::run_waste({"bench", model.string(), "--in-process", "--streams", "2", "-n", "0"});
  CHECK(none.rc != 0);
  CHECK(none.err.find("--streams needs decode passes (-n at least 1)") != std::string::npos);
}

}  // namespace
}  // namespace waste

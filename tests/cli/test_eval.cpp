// waste eval: perplexity against one computed here from Engine::eval logits (log-softmax in
// double), from a text file and from an id file.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "compute/api/engine.hpp"
#include "compute/tokenizer/tokenizer.hpp"

namespace waste {
namespace {

const std::string kText = "The quick brown fox jumps over the lazy dog. Perplexity is the exponential of the mean NLL.";

// The oracle: feed token by token, score token i+1 with the logits after token i.
double mean_nll(const std::vector<int>& ids) {
  EngineOptions options;
  options.model = test::tokenizer_container();
  options.threads = 1;
  options.ctx_tokens = 256;
  auto engine = Engine::open(options);
  REQUIRE(engine);
  double sum = 0;
  for (std::size_t i = 0; i + 1 < ids.size(); ++i) {
    auto logits = (*engine)->eval(std::span<const int>(&ids[i], 1));
    REQUIRE(logits);
    double z = 0;
    for (const float v : *logits) z += std::exp(double(v));
    sum += std::log(z) - double((*logits)[std::size_t(ids[i + 1])]);
  }
  return sum / double(ids.size() - 1);
}

}  // namespace

TEST_CASE("waste eval reports the perplexity of a text and of ids", "[cli][eval]") {
  const auto& model = test::tokenizer_container();
  auto tok = Tokenizer::load(model);
  REQUIRE(tok);
  const std::vector<int> ids = tok->encode(kText);
  REQUIRE(ids.size() > 10);
  const double expected = mean_nll(ids);

  test::ScratchDir dir;
  test::write_text(dir.path() / "text.txt", kText);
  auto ran = test::run_waste(
      {"eval", model.string(), "--threads", "1", "--ctx", "256", "--file", (dir.path() / "text.txt").string(), "--json"});
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  auto doc = nlohmann::json::parse(ran.out);
  CHECK(doc["tokens"].get<std::size_t>() == ids.size());
  CHECK(doc["scored"].get<std::size_t>() == ids.size() - 1);
  CHECK(doc["mean_nll"].get<double>() == Approx(expected).epsilon(1e-12));
  CHECK(doc["perplexity"].get<double>() == Approx(std::exp(expected)).epsilon(1e-12));

  std::string id_text;
  for (const int id : ids) id_text += std::to_string(id) + "\n";
  test::write_text(dir.path() / "ids.txt", id_text);
  ran = test::run_waste({"eval", model.string(), "--threads", "1", "--ctx", "256", "--ids-file",
                         (dir.path() / "ids.txt").string()});
  REQUIRE(ran.rc == 0);
  char mean_line[64], ppl_line[64];
  std::snprintf(mean_line, sizeof mean_line, "mean_nll %.6f", expected);
  std::snprintf(ppl_line, sizeof ppl_line, "perplexity %.6f", std::exp(expected));
  CHECK(test::split_lines(ran.out) ==
        std::vector<std::string>{"tokens " + std::to_string(ids.size()), "scored " + std::to_string(ids.size() - 1),
                                 mean_line, ppl_line});
}

TEST_CASE("waste eval needs two tokens and an input", "[cli][eval]") {
  const auto& model = test::tokenizer_container();
  test::ScratchDir dir;
  test::write_text(dir.path() / "one.txt", "7");
  auto ran = test::run_waste({"eval", model.string(), "--ids-file", (dir.path() / "one.txt").string()});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste eval: need at least 2 tokens to score, got 1\n");
  ran = test::run_waste({"eval", model.string()});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste eval: give a prompt, --file TEXT or --ids-file IDS\n");
  ran = test::run_waste({"eval", model.string(), "hello", "--file", (dir.path() / "one.txt").string()});
  CHECK(ran.rc == 1);
  CHECK(ran.err ==
        "waste eval: give a prompt (next-token distribution) or --file/--ids-file (perplexity), not both\n");
}

TEST_CASE("waste eval MODEL prompt lists the most likely next tokens with logits and probabilities",
          "[cli][eval]") {
  const auto& model = test::tokenizer_container();
  auto tok = Tokenizer::load(model);
  REQUIRE(tok);
  const std::string prompt = "The quick brown fox";
  const std::vector<int> ids = tok->encode(prompt);
  REQUIRE(ids.size() > 1);

  // The oracle: the engine's logits after the whole prompt, softmax in double, ranked by logit
  // (ties: lower id first).
  EngineOptions options;
  options.model = model;
  options.threads = 1;
  options.ctx_tokens = 64;
  auto engine = Engine::open(options);
  REQUIRE(engine);
  auto logits_result = (*engine)->eval(ids);
  REQUIRE(logits_result);
  const std::vector<float> logits(logits_result->begin(), logits_result->end());
  double max = logits[0];
  for (const float v : logits) max = std::max(max, double(v));
  double z = 0;
  for (const float v : logits) z += std::exp(double(v) - max);
  std::vector<int> order(logits.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return logits[std::size_t(a)] > logits[std::size_t(b)]; });

  const std::vector<std::string> common = {"eval", model.string(), prompt, "--threads", "1", "--ctx", "64", "--in-process"};
  auto args = common;
  args.push_back("--json");
  auto ran = test::run_waste(args);
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  const auto doc = nlohmann::json::parse(ran.out);
  CHECK(doc["prompt_tokens"].get<std::size_t>() == ids.size());
  CHECK(doc["vocab"].get<std::size_t>() == logits.size());
  REQUIRE(doc["top"].size() == 10);  // --top defaults to 10
  for (std::size_t i = 0; i < 10; ++i) {
    const int id = order[i];
    INFO("rank " << i);
    CHECK(doc["top"][i]["id"].get<int>() == id);
    CHECK(doc["top"][i]["logit"].get<double>() == double(logits[std::size_t(id)]));
    CHECK(doc["top"][i]["prob"].get<double>() ==
          Approx(std::exp(double(logits[std::size_t(id)]) - max) / z).epsilon(1e-12));
    // A piece that is not whole UTF-8 is written with U+FFFD in place of the bad bytes.
    const std::string piece = nlohmann::json(tok->decode_token(id)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    CHECK(doc["top"][i]["piece"].get<std::string>() == nlohmann::json::parse(piece).get<std::string>());
  }

  // Text: one line per token, "id  logit  prob  \"piece\"".
  args = common;
  args.insert(args.end(), {"--top", "3"});
  ran = test::run_waste(args);
  REQUIRE(ran.rc == 0);
  std::vector<std::string> expected;
  for (std::size_t i = 0; i < 3; ++i) {
    const int id = order[i];
    char line[128];
    std::snprintf(line, sizeof line, "%6d  %9.4f  %8.6f  ", id, double(logits[std::size_t(id)]),
                  std::exp(double(logits[std::size_t(id)]) - max) / z);
    expected.push_back(line + nlohmann::json(tok->decode_token(id)).dump(-1, ' ', false,
                                                                         nlohmann::json::error_handler_t::replace));
  }
  CHECK(test::split_lines(ran.out) == expected);

  // More than the vocabulary lists every token once.
  args = common;
  args.insert(args.end(), {"--top", "100000", "--json"});
  ran = test::run_waste(args);
  REQUIRE(ran.rc == 0);
  CHECK(nlohmann::json::parse(ran.out)["top"].size() == logits.size());
}

}  // namespace waste

namespace waste {

TEST_CASE("waste eval through waste-ioserver (the default) scores exactly as --in-process", "[cli][eval][daemon]") {
  const auto ioserver = test::waste_bin().parent_path().parent_path() / "ioserver" / "waste-ioserver";
  INFO("needs " << ioserver << " (build the waste-ioserver target)");
  REQUIRE(std::filesystem::exists(ioserver));
  test::ScratchDir dir;
  ::setenv("WASTE_RUNTIME_DIR", dir.path().c_str(), 1);  // a private daemon, invisible to others
  ::setenv("WASTE_IOSERVER", ioserver.c_str(), 1);
  const auto& model = test::tokenizer_container();
  test::write_text(dir.path() / "ids.txt", "1 17 42 99 5 7 8 200 13 77 300 12");
  const std::vector<std::string> args = {"eval", model.string(), "--threads", "1", "--ctx", "64", "--ids-file",
                                         (dir.path() / "ids.txt").string(), "--json"};
  auto local_args = args;
  local_args.push_back("--in-process");
  const auto local = test::run_waste(local_args);
  INFO(local.err);
  REQUIRE(local.rc == 0);
  const auto daemon = test::run_waste(args);
  INFO(daemon.err);
  REQUIRE(daemon.rc == 0);
  const auto a = nlohmann::json::parse(local.out), b = nlohmann::json::parse(daemon.out);
  CHECK(b["mean_nll"].get<double>() == a["mean_nll"].get<double>());
  CHECK(b["tokens"] == a["tokens"]);
  CHECK(b["experts"]["misses"].get<std::uint64_t>() + b["experts"]["hits"].get<std::uint64_t>() > 0);
}

}  // namespace waste

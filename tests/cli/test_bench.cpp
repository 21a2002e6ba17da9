// waste bench: prefill and decode reported separately, token counts as asked, expert counters
// consistent with the routing (every token asks top_k experts in every MoE layer).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "shared/container/manifest.hpp"

namespace waste {

TEST_CASE("waste bench --json reports prefill and decode separately", "[cli][bench]") {
  const auto& model = test::tokenizer_container();
  auto manifest = Manifest::parse(test::slurp(model / "manifest.json"));
  REQUIRE(manifest);
  const std::uint64_t per_token = std::uint64_t(manifest->config.top_k) * manifest->config.n_moe_layers();
  const std::uint64_t rec = manifest->banks.begin()->second.record_bytes();

  // In-process at the smallest arena (2 * top_k slots), no prefetch: reads are the demands' misses.
  auto ran = test::run_waste({"bench", model.string(), "--threads", "1", "--prompt-tokens", "8", "-n", "5", "--json",
                              "--in-process", "--cache-records", "0", "--lookahead", "0"});
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  const auto doc = nlohmann::json::parse(ran.out);
  for (const char* phase : {"prefill", "decode"}) {
    INFO(phase);
    const auto& p = doc[phase];
    for (const char* key : {"tokens", "seconds", "tokens_per_second", "experts_hit", "experts_missed", "bytes_read"}) {
      CHECK(p.contains(key));
    }
    const auto tokens = p["tokens"].get<std::uint64_t>();
    CHECK(tokens == (std::string(phase) == "prefill" ? 8u : 5u));
    // Decode asks top_k experts per MoE layer per token (a record the tiny arena still holds is
    // a hit) and reads only its misses (no lookahead). Chunked prefill asks each distinct expert
    // of a chunk once, in windows of 2 with the next window prefetched: every one read once.
    const auto misses = p["experts_missed"].get<std::uint64_t>();
    const auto demands = misses + p["experts_hit"].get<std::uint64_t>();
    if (std::string(phase) == "decode") {
      CHECK(demands == tokens * per_token);
      CHECK(misses > 0);
      CHECK(p["bytes_read"].get<std::uint64_t>() == misses * rec);
    } else {
      CHECK(demands >= std::uint64_t(manifest->config.top_k) * manifest->config.n_moe_layers());
      CHECK(demands <= tokens * per_token);
      CHECK(p["bytes_read"].get<std::uint64_t>() == demands * rec);
    }
    const double seconds = p["seconds"].get<double>();
    CHECK(seconds > 0);
    CHECK(p["tokens_per_second"].get<double>() == Approx(double(tokens) / seconds));
  }
  CHECK(doc["threads"].get<int>() == 1);
}

TEST_CASE("waste bench prints a table with one row per phase", "[cli][bench]") {
  auto ran = test::run_waste(
      {"bench", test::tokenizer_container().string(), "--threads", "1", "--prompt-tokens", "4", "-n", "3"});
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  const auto lines = test::split_lines(ran.out);
  REQUIRE(lines.size() == 4);
  CHECK(lines[1].starts_with("phase"));
  std::istringstream prefill(lines[2]), decode(lines[3]);
  std::string name;
  int tokens = 0;
  prefill >> name >> tokens;
  CHECK(name == "prefill");
  CHECK(tokens == 4);
  decode >> name >> tokens;
  CHECK(name == "decode");
  CHECK(tokens == 3);

  ran = test::run_waste({"bench", test::tokenizer_container().string(), "--ctx", "16", "--prompt-tokens", "10", "-n",
                         "6"});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste bench: prompt 10 + decode 6 tokens do not fit a context of 16 (--ctx)\n");
}

TEST_CASE("waste bench --prefill-matmul takes on, off or a token count and names a bad value", "[cli][bench]") {
  for (const char* rule : {"off", "on", "2"}) {
    INFO(rule);
    auto ran = test::run_waste({"bench", test::tokenizer_container().string(), "--threads", "1", "--prompt-tokens", "4",
                                "-n", "2", "--prefill-matmul", rule});
    INFO(ran.err);
    CHECK(ran.rc == 0);
  }
  auto bad = test::run_waste({"bench", test::tokenizer_container().string(), "--prompt-tokens", "4", "-n", "2",
                              "--prefill-matmul", "sometimes"});
  CHECK(bad.rc == 1);
  CHECK(bad.err == "waste bench: --prefill-matmul: 'sometimes' is not off, on or a token count in 1..64\n");
}

TEST_CASE("waste bench --prefill-int8 reports the mode it ran with and names a bad value", "[cli][bench]") {
  for (const char* mode : {"off", "on"}) {
    INFO(mode);
    const auto doc = test::run_waste_json({"bench", test::tokenizer_container().string(), "--threads", "1",
                                           "--in-process", "--prompt-tokens", "4", "-n", "2", "--prefill-int8", mode,
                                           "--json"});
    CHECK(doc["prefill_int8"].get<bool>() == (std::string(mode) == "on"));
  }
  auto bad = test::run_waste({"bench", test::tokenizer_container().string(), "--prompt-tokens", "4", "-n", "2",
                              "--prefill-int8", "maybe"});
  CHECK(bad.rc == 1);
  CHECK(bad.err == "waste bench: --prefill-int8: 'maybe' is not on or off\n");
}

TEST_CASE("A cache size without --in-process is refused, saying what to use, and --daemon is gone", "[cli][bench]") {
  const auto model = test::tokenizer_container().string();
  for (const std::vector<std::string>& args : {std::vector<std::string>{"bench", model, "-n", "1"},
                                               std::vector<std::string>{"run", model, "--ids", "1,2,3", "-n", "1"}}) {
    INFO(args[0]);
    // Hazard: a cache size nobody builds (a daemon's arena comes from its budget), silently ignored.
    auto with_records = args;
    with_records.insert(with_records.end(), {"--cache-records", "8"});
    auto ran = test::run_waste(with_records);
    CHECK(ran.rc == 1);
    const std::string where = args[0] == "bench" ? "waste bench: open: " : "waste run: ";  // bench names its step
    CHECK(ran.err == where + "--cache-records sizes the in-process cache; with a daemon use --budget (or add --in-process)\n");
    auto with_daemon = args;
    with_daemon.push_back("--daemon");
    auto old = test::run_waste(with_daemon);
    CHECK(old.rc != 0);
    CHECK(old.err.find("--daemon") != std::string::npos);
  }
}

}  // namespace waste

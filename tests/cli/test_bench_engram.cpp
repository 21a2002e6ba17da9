// waste bench on a DeepSeek-V4.1 container with Engram tables (issue 29): the Engram line per
// phase (rows asked, hit %, pages and bytes read, wait, per token) and the origin, the same
// fields in --json, --engram-readahead on|off (and its exact refusal), and `waste run`'s one
// origin line; a container without Engram prints nothing of it.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <regex>

#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"

namespace waste {
namespace {

namespace fs = std::filesystem;

// tiny-v41 with Engram on layer 1 (2- and 3-grams, 2 heads: 4 rows per token), through
// `waste synth --config`, once per process.
const fs::path& engram_container() {
  static test::ScratchDir dir;
  static fs::path model;
  if (model.empty()) {
    REQUIRE_FALSE(dir.path().empty());
    auto preset = nlohmann::json::parse(test::slurp(fs::path(WASTE_SOURCE_DIR) / "configs/presets/tiny-v41.json"));
    preset["engram_layer_ids"] = {1};
    preset["engram_num_embeddings"] = {240};  // the primes drawn from 50: 53 + 59 + 61 + 67
    preset["engram_vocab_size"] = 50;
    preset["engram_max_ngram_size"] = 3;
    preset["engram_n_heads"] = 2;
    preset["engram_head_dim"] = 32;
    preset["engram_pad_id"] = 2;
    preset["engram_compressed_vocab_size"] = 200;
    const fs::path config = dir.path() / "tiny-v41-engram.json";
    test::write_text(config, preset.dump());
    const fs::path out = dir.path() / "tiny-v41-engram.waste";
    const auto ran = test::run_waste({"synth", "--config", config.string(), "--out", out.string()});
    INFO(ran.err);
    REQUIRE(ran.rc == 0);
    model = out;
  }
  return model;
}

std::vector<std::string> bench_args(const std::string& model, std::initializer_list<std::string> more) {
  std::vector<std::string> args{"bench", model, "--in-process", "--threads", "1", "--prompt-tokens", "8", "-n", "4"};
  args.insert(args.end(), more);
  return args;
}

}  // namespace

TEST_CASE("waste bench --json reports Engram reads per phase with read-ahead on and off", "[cli][bench][engram]") {
  const std::string model = engram_container().string();
  for (const char* readahead : {"on", "off"}) {
    INFO("--engram-readahead " << readahead);
    const auto doc = test::run_waste_json(bench_args(model, {"--json", "--engram-readahead", readahead}));
    CHECK(doc["engram_readahead"].get<bool>() == (std::string(readahead) == "on"));
    CHECK(doc["engram_origin"] == "Engram rows: the in-process data plane's shared page pool");
    for (const char* phase : {"prefill", "decode"}) {
      INFO(phase);
      const auto& e = doc[phase]["engram"];
      const auto tokens = e["tokens"].get<std::uint64_t>();
      CHECK(tokens == (std::string(phase) == "prefill" ? 8u : 4u));
      // Every token fed asks its 4 rows once; decode feeds each generated token.
      CHECK(e["rows_asked"].get<std::uint64_t>() == 4 * tokens);
      CHECK(e["rows_per_token"].get<double>() == 4.0);
      CHECK(e["hits"].get<std::uint64_t>() + e["misses"].get<std::uint64_t>() == 4 * tokens);
      const auto bytes = e["bytes_read"].get<std::uint64_t>();
      CHECK(bytes == e["pages_read"].get<std::uint64_t>() * 4096);
      CHECK(e["bytes_per_token"].get<double>() == Approx(double(bytes) / double(tokens)));
      CHECK(e["pages_per_token"].get<double>() == Approx(double(bytes) / 4096.0 / double(tokens)));
      CHECK(e["wait_seconds"].get<double>() > 0.0);
      // The pool's pages asked ahead: none with read-ahead off.
      if (std::string(readahead) == "off") CHECK(e["prefetched"].get<std::uint64_t>() == 0);
      if (std::string(readahead) == "on") CHECK(e["prefetched"].get<std::uint64_t>() > 0);
      CHECK(e["wait_ms_per_token"].get<double>() == Approx(e["wait_seconds"].get<double>() * 1e3 / double(tokens)));
    }
    // 240 rows of 34 bytes are 2 pages of 120 rows: a cold pool reads at most both, once. With
    // read-ahead off the prompt's demands read every page its rows are on (at least one).
    const auto prefill_bytes = doc["prefill"]["engram"]["bytes_read"].get<std::uint64_t>();
    const auto decode_bytes = doc["decode"]["engram"]["bytes_read"].get<std::uint64_t>();
    CHECK(prefill_bytes + decode_bytes <= 2 * 4096);
    if (std::string(readahead) == "off") CHECK(prefill_bytes >= 4096);
  }
}

TEST_CASE("waste bench prints one Engram line per phase and the origin, only with Engram tables", "[cli][bench][engram]") {
  auto ran = test::run_waste(bench_args(engram_container().string(), {"--engram-readahead", "off"}));
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  const auto lines = test::split_lines(ran.out);
  REQUIRE(lines.size() == 7);  // the header, the table (3), the Engram lines (3)
  const std::regex row(R"(engram  (prefill|decode) +([0-9.]+) rows/token  hit +([0-9.]+)%  ([0-9.]+) pages/token  ([0-9]+) B/token  wait ([0-9.]+) ms/token  ahead ([0-9.]+)/token)");
  std::smatch m;
  REQUIRE(std::regex_match(lines[4], m, row));
  CHECK(m[1] == "prefill");
  CHECK(std::stod(m[2]) == 4.0);
  CHECK(std::stod(m[5]) == Approx(std::stod(m[4]) * 4096).margin(1.0));
  CHECK(std::stod(m[7]) == 0.0);  // read-ahead off: the pool is asked for nothing ahead
  REQUIRE(std::regex_match(lines[5], m, row));
  CHECK(m[1] == "decode");
  CHECK(std::stod(m[2]) == 4.0);
  CHECK(std::stod(m[7]) == 0.0);
  CHECK(lines[6] == "engram  read-ahead off  Engram rows: the in-process data plane's shared page pool");

  // A container without Engram: the table alone.
  auto plain = test::run_waste(bench_args(test::tokenizer_container().string(), {"--engram-readahead", "off"}));
  INFO(plain.err);
  REQUIRE(plain.rc == 0);
  CHECK(test::split_lines(plain.out).size() == 4);
  CHECK(plain.out.find("engram") == std::string::npos);
}

TEST_CASE("waste bench --engram-readahead names a bad value", "[cli][bench][engram]") {
  auto bad = test::run_waste(bench_args(engram_container().string(), {"--engram-readahead", "sometimes"}));
  CHECK(bad.rc == 1);
  CHECK(bad.out.empty());
  CHECK(bad.err == "waste bench: --engram-readahead: 'sometimes' is not on or off (1 or 0)\n");
}

TEST_CASE("waste run prints the Engram origin once, and WASTE_ENGRAM_READAHEAD=0 turns read-ahead off", "[cli][engram]") {
  const std::vector<std::string> args{"run", engram_container().string(), "--in-process", "--threads", "1",
                                      "--ids", "5,6,7", "-n", "2"};
  auto on = test::run_waste(args);
  INFO(on.err);
  REQUIRE(on.rc == 0);
  const std::string line = "waste run: Engram rows: the in-process data plane's shared page pool; read-ahead ";
  CHECK(test::split_lines(on.err).front() == line + "on");
  ::setenv("WASTE_ENGRAM_READAHEAD", "0", 1);
  auto off = test::run_waste(args);
  ::setenv("WASTE_ENGRAM_READAHEAD", "nope", 1);
  auto bad = test::run_waste(args);
  ::unsetenv("WASTE_ENGRAM_READAHEAD");
  INFO(off.err);
  REQUIRE(off.rc == 0);
  CHECK(test::split_lines(off.err).front() == line + "off");
  CHECK(off.out == on.out);  // the same tokens
  CHECK(bad.rc == 1);
  CHECK(bad.err.find("WASTE_ENGRAM_READAHEAD: 'nope' is not on or off (1 or 0)") != std::string::npos);
  // Without Engram: no such line.
  auto plain = test::run_waste({"run", test::tokenizer_container().string(), "--in-process", "--threads", "1", "--ids",
                                "5,6,7", "-n", "2"});
  REQUIRE(plain.rc == 0);
  CHECK(plain.err.find("Engram") == std::string::npos);
}

}  // namespace waste

// The command line a new user meets: option values are refused in words before any file is
// opened or any daemon started; every value option's --help line shows its default; a path that
// is not a container, or one from a newer format, says so.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cstdlib>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"

namespace waste {
namespace {

namespace fs = std::filesystem;

// WASTE_IOSERVER pointing at a script that records that it was started (then fails), so a test
// sees whether a command got as far as starting a daemon. The environment is this process's and
// the commands it spawns; every test case of this file sets it itself, and puts back what was
// there when it ends (other files' test cases in the same process must not start the fake).
struct FakeIoserver {
  test::ScratchDir dir;
  fs::path marker = dir.path() / "started";
  std::optional<std::string> saved_ioserver = saved("WASTE_IOSERVER");
  std::optional<std::string> saved_runtime = saved("WASTE_RUNTIME_DIR");
  static std::optional<std::string> saved(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  }
  static void restore(const char* name, const std::optional<std::string>& value) {
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~FakeIoserver() {
    restore("WASTE_IOSERVER", saved_ioserver);
    restore("WASTE_RUNTIME_DIR", saved_runtime);
  }
  FakeIoserver(const FakeIoserver&) = delete;
  FakeIoserver& operator=(const FakeIoserver&) = delete;
  FakeIoserver() {
    const fs::path script = dir.path() / "fake-ioserver";
    test::write_text(script, "#!/bin/sh\necho \"$@\" >> '" + marker.string() + "'\nexit 3\n");
    ::chmod(script.c_str(), 0755);
    ::setenv("WASTE_IOSERVER", script.c_str(), 1);
    ::setenv("WASTE_RUNTIME_DIR", dir.path().c_str(), 1);  // no shared daemon of another test is found
  }
  [[nodiscard]] bool started() const { return fs::exists(marker); }
};

struct Refusal {
  std::vector<std::string> args;
  std::string err;
};

}  // namespace

TEST_CASE("bad option values are refused in words before a file is opened or a daemon started", "[cli][options]") {
  FakeIoserver fake;
  // The control: a good command line does reach the daemon start (the fake fails it).
  const auto& model = test::tokenizer_container();
  const auto good = test::run_waste({"run", model.string(), "--ids", "1,2", "-n", "1"});
  REQUIRE(good.rc != 0);
  REQUIRE(fake.started());
  fs::remove(fake.marker);

  // The model does not exist: had a command looked at it (or started a daemon for it) before
  // checking its options, it would say so instead of naming the option.
  const std::string none = "/nonexistent/model.waste";
  const std::vector<Refusal> refusals = {
      {{"run", none, "hi", "--ctx", "0"}, "waste run: --ctx must be between 1 and 1048576\n"},
      {{"run", none, "hi", "--ctx", "2000000"}, "waste run: --ctx must be between 1 and 1048576\n"},
      {{"run", none, "hi", "--ctx", "abc"}, "waste run: --ctx: 'abc' is not a whole number\n"},
      {{"run", none, "hi", "--temp", "-1"}, "waste run: --temp must be >= 0\n"},
      {{"run", none, "hi", "--temp", "nan"}, "waste run: --temp: 'nan' is not a number\n"},
      {{"run", none, "hi", "--top-p", "0"}, "waste run: --top-p must be > 0 and <= 1\n"},
      {{"run", none, "hi", "--top-p", "1.5"}, "waste run: --top-p must be > 0 and <= 1\n"},
      {{"run", none, "hi", "--top-k", "-1"}, "waste run: --top-k must be >= 0\n"},
      {{"run", none, "hi", "--top-k", "9999999999"}, "waste run: --top-k must be at most 2147483647\n"},
      {{"run", none, "hi", "--seed", "-1"}, "waste run: --seed must be between 0 and 18446744073709551615\n"},
      {{"run", none, "hi", "--seed", "18446744073709551616"},
       "waste run: --seed must be between 0 and 18446744073709551615\n"},
      {{"run", none, "hi", "--top-k", "-99999999999999999999"}, "waste run: --top-k must be >= 0\n"},
      {{"run", none, "hi", "--budget", "12Q"}, "waste run: --budget: '12Q' is not a size (use e.g. 8G, 500M)\n"},
      {{"run", none, "hi", "--budget", "0"}, "waste run: --budget must be above 0 (omit it for the automatic budget)\n"},
      {{"run", none, "hi", "--threads", "5000"}, "waste run: --threads must be between 0 and 1024\n"},
      {{"run", none, "-n", "-1", "hi"}, "waste run: -n must be between 0 and 1048576\n"},
      {{"run", none, "--ids", "1,x"}, "waste run: --ids: 'x' is not a whole number\n"},
      {{"run", none, "--ids", "1", "--stop", "-2"}, "waste run: --stop must be >= 0\n"},
      {{"run", none, "hi", "--linger", "-5"}, "waste run: --linger must be between 0 and 86400000\n"},
      {{"chat", none, "--temp", "-0.5"}, "waste chat: --temp must be >= 0\n"},
      {{"chat", none, "--budget", "lots"}, "waste chat: --budget: 'lots' is not a size (use e.g. 8G, 500M)\n"},
      {{"eval", none, "hi", "--top", "0"}, "waste eval: --top must be >= 1\n"},
      {{"eval", none, "--file", "x.txt", "--ctx", "-3"}, "waste eval: --ctx must be between 1 and 1048576\n"},
      {{"bench", none, "--lookahead", "65"}, "waste bench: --lookahead must be between -1 and 64\n"},
      {{"bench", none, "--prefill-chunk", "513"}, "waste bench: --prefill-chunk must be between 1 and 512\n"},
      {{"plan", none, "--prefill-chunk", "0"}, "waste plan: --prefill-chunk must be between 1 and 512\n"},
      {{"bench", none, "--prompt-tokens", "0"}, "waste bench: --prompt-tokens must be between 1 and 1048576\n"},
      {{"bench", none, "--sweep", "1G,lots"}, "waste bench: --sweep: 'lots' is not a size (use e.g. 500M,2G)\n"},
      {{"plan", none, "--budget", "8X"}, "waste plan: --budget: '8X' is not a size (use e.g. 8G, 500M)\n"},
      {{"plan", none, "--ctx", "0"}, "waste plan: --ctx must be between 1 and 1048576\n"},
      {{"convert", "/nonexistent/hf", "--out", "/nonexistent/out.waste", "--stages", "5"},
       "waste convert: --stages must be one of 2, 3, 4\n"},
      {{"convert", "/nonexistent/hf", "--out", "/nonexistent/out.waste", "--entries", "4"},
       "waste convert: --entries must be between 8 and 256\n"},
      {{"synth", "--preset", "tiny", "--out", "/nonexistent/out.waste", "--experts", "vq9"},
       "waste synth: --experts must be one of vq3r, vq2r, vq4p\n"},
      {{"synth", "--preset", "tiny", "--out", "/nonexistent/out.waste", "--seed", "x"},
       "waste synth: --seed: 'x' is not a whole number\n"},
      {{"serve", none, "--port", "70000"}, "waste serve: --port must be between 0 and 65535\n"},
      {{"serve", none, "--max-body-mib", "0"}, "waste serve: --max-body-mib must be > 0 and <= 1024\n"},
      {{"serve", none, "--prefix-cache", "lots"},
       "waste serve: --prefix-cache: 'lots' is not a size (use e.g. 512M, 2G, or 0 to turn it off)\n"},
  };
  for (const auto& r : refusals) {
    std::string line;
    for (const auto& a : r.args) line += a + " ";
    INFO("waste " << line);
    const auto ran = test::run_waste(r.args);
    CHECK(ran.err == r.err);
    CHECK(ran.rc == 2);
    CHECK(ran.out.empty());
  }
  CHECK_FALSE(fake.started());
}

TEST_CASE("every value option of every command shows its default in --help", "[cli][options]") {
  const std::vector<std::string> commands = {"run",  "chat",    "eval",  "bench",    "plan",       "info",   "synth",
                                             "convert", "serve", "tokenize", "detokenize", "verify", "version"};
  for (const auto& command : commands) {
    INFO("waste " << command << " --help");
    const auto ran = test::run_waste({command, "--help"});
    REQUIRE(ran.rc == 0);
    int value_options = 0;
    for (const auto& line : test::split_lines(ran.out)) {
      // "  --ctx TOKENS=4096     Context length in tokens": names, then a value's type and default.
      if (line.size() < 3 || line.rfind("  ", 0) != 0 || line[2] == ' ') continue;
      const std::string left = line.substr(2, line.find("  ", 2) - 2);
      const auto space = left.find(' ');
      if (space == std::string::npos) continue;  // a flag: no value, off unless given
      INFO(line);
      ++value_options;
      CHECK((left.find('=') != std::string::npos || left.find("REQUIRED") != std::string::npos));
    }
    if (command != "version") CHECK(value_options > 0);
  }
  const auto run = test::run_waste({"run", "--help"}).out;
  for (const char* shown : {"--ctx TOKENS=4096", "-n,--tokens TOKENS=16", "--budget SIZE=auto", "--temp T=0",
                            "--top-p P=1", "--top-k K=0", "--seed SEED=0", "--threads N=0", "--linger MS=3000"}) {
    INFO(shown);
    CHECK(run.find(shown) != std::string::npos);
  }
  CHECK(test::run_waste({"chat", "--help"}).out.find("-n,--tokens TOKENS=512") != std::string::npos);
  CHECK(test::run_waste({"eval", "--help"}).out.find("--top N=10") != std::string::npos);
  CHECK(test::run_waste({"serve", "--help"}).out.find("--port PORT=8080") != std::string::npos);
}

TEST_CASE("a path that is not a container says so, with how to make one", "[cli][options][container]") {
  FakeIoserver fake;
  test::ScratchDir dir;
  const fs::path empty = dir.path() / "empty";
  fs::create_directory(empty);
  const fs::path file = dir.path() / "model.gguf";
  test::write_text(file, "not a container");
  const fs::path missing = dir.path() / "missing.waste";
  const std::string hint = "make one with `waste synth` or `waste convert`";
  const std::string no_manifest = empty.string() + " is not a WASTE container (no manifest.json): " + hint + "\n";

  // The daemon path (the default) and the in-process path both.
  auto ran = test::run_waste({"run", empty.string(), "hi"});
  CHECK(ran.err == "waste run: " + no_manifest);
  CHECK(ran.rc == 1);
  ran = test::run_waste({"run", empty.string(), "--ids", "1", "--in-process"});
  CHECK(ran.err == "waste run: " + no_manifest);
  ran = test::run_waste({"eval", empty.string(), "hi"});
  CHECK(ran.err == "waste eval: " + no_manifest);
  ran = test::run_waste({"plan", empty.string()});
  CHECK(ran.err == "waste plan: " + no_manifest);
  ran = test::run_waste({"info", empty.string()});
  CHECK(ran.err == "waste info: " + no_manifest);
  ran = test::run_waste({"verify", empty.string()});
  CHECK(ran.err == "waste verify: " + no_manifest);
  CHECK(ran.rc == 2);
  ran = test::run_waste({"tokenize", empty.string(), "hi"});
  CHECK(ran.err == "waste tokenize: " + no_manifest);

  // The daemon reads containers through the same function.
  REQUIRE(fs::exists(test::ioserver_bin()));
  ran = test::run_binary(test::ioserver_bin(), {empty.string()});
  CHECK(ran.err == "waste-ioserver: " + no_manifest);
  CHECK(ran.rc == 1);
  ran = test::run_binary(test::ioserver_bin(), {missing.string()});
  CHECK(ran.err == "waste-ioserver: " + missing.string() + " does not exist (a model is a NAME.waste directory: " + hint +
                       ")\n");
  ran = test::run_binary(test::ioserver_bin(), {file.string()});
  CHECK(ran.err == "waste-ioserver: " + file.string() + " is not a WASTE container (not a directory): " + hint + "\n");

  ran = test::run_waste({"run", file.string(), "hi"});
  CHECK(ran.err == "waste run: " + file.string() + " is not a WASTE container (not a directory): " + hint + "\n");
  ran = test::run_waste({"info", missing.string()});
  CHECK(ran.err == "waste info: " + missing.string() + " does not exist (a model is a NAME.waste directory: " + hint +
                       ")\n");
  CHECK_FALSE(fake.started());
}

TEST_CASE("a container from a newer format version names both versions", "[cli][options][container]") {
  FakeIoserver fake;
  test::ScratchDir dir;
  const fs::path model = dir.path() / "future.waste";
  auto made = test::run_waste({"synth", "--preset", "tiny", "--out", model.string()});
  REQUIRE(made.rc == 0);
  auto manifest = nlohmann::json::parse(test::slurp(model / "manifest.json"));
  manifest["format_version"] = 3;
  test::write_text(model / "manifest.json", manifest.dump());
  const std::string newer = (model / "manifest.json").string() +
                            ": format_version 3 is newer than this build of WASTE reads (0); update WASTE to open "
                            "this container\n";
  CHECK(test::run_waste({"info", model.string()}).err == "waste info: " + newer);
  CHECK(test::run_waste({"plan", model.string()}).err == "waste plan: " + newer);
  CHECK(test::run_waste({"run", model.string(), "--ids", "1"}).err == "waste run: " + newer);
  CHECK(test::run_waste({"run", model.string(), "--ids", "1", "--in-process"}).err == "waste run: " + newer);
  CHECK(test::run_waste({"verify", model.string()}).err == "waste verify: " + newer);
  REQUIRE(fs::exists(test::ioserver_bin()));
  CHECK(test::run_binary(test::ioserver_bin(), {model.string()}).err == "waste-ioserver: " + newer);
  CHECK_FALSE(fake.started());
}

}  // namespace waste

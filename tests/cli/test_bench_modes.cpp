// waste bench's measurement modes on the tiny container: the fields each mode reports and how
// they must agree with each other and with the routing (consistency, never speed).
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include <cstdlib>
#include <numeric>
#include <set>
#include <thread>
#include <algorithm>

#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "shared/container/manifest.hpp"

namespace waste {
namespace {

using nlohmann::json;

struct TinyShape {
  std::uint64_t per_token = 0;  // expert requests per decoded token (top_k per MoE layer)
  std::uint64_t record = 0;
  int moe_layers = 0;
};

TinyShape tiny_shape() {
  auto manifest = Manifest::parse(test::slurp(test::tokenizer_container() / "manifest.json"));
  REQUIRE(manifest);
  return TinyShape{std::uint64_t(manifest->config.top_k) * manifest->config.n_moe_layers(),
                   manifest->banks.begin()->second.record_bytes(), manifest->config.n_moe_layers()};
}

// The daemon modes: a private runtime dir per test process, and the built waste-ioserver.
void use_private_runtime_dir() {
  static test::ScratchDir dir;
  ::setenv("WASTE_RUNTIME_DIR", dir.path().c_str(), 1);
  const auto ioserver = test::waste_bin().parent_path().parent_path() / "ioserver" / "waste-ioserver";
  INFO("needs " << ioserver << " (build the waste-ioserver target)");
  REQUIRE(std::filesystem::exists(ioserver));
  ::setenv("WASTE_IOSERVER", ioserver.c_str(), 1);
  // A daemon a command starts stays this long after its last client (shared by the next one).
  ::setenv("WASTE_LINGER_MS", "200", 1);
}

// Nothing of a daemon left once its linger ran out (bounded wait, not a timing assertion).
bool runtime_dir_empty_of_daemons() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    bool empty = true;
    for (const auto& entry : std::filesystem::directory_iterator(std::getenv("WASTE_RUNTIME_DIR"))) {
      if (entry.path().extension() == ".json" || entry.path().extension() == ".sock") empty = false;
    }
    if (empty || std::chrono::steady_clock::now() >= deadline) return empty;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

TEST_CASE("waste bench --profile reports each phase's stage timings", "[cli][bench]") {
  use_private_runtime_dir();
  const auto doc = test::run_waste_json({"bench", test::tokenizer_container().string(), "--threads", "2", "--prompt-tokens", "6",
                             "-n", "4", "--profile", "--json"});
  for (const char* phase : {"prefill", "decode"}) {
    INFO(phase);
    const auto& p = doc[phase]["profile"];
    REQUIRE(p.is_object());
    CHECK(p["tokens"].get<int>() == doc[phase]["tokens"].get<int>());
    for (const char* stage : {"router", "lut_build", "expert_matmul", "attention_kda", "attention_mla", "lm_head", "io_wait"}) {
      CHECK(p["stages"].contains(stage));
    }
    double accounted = 0;
    for (const auto& [name, s] : p["stages"].items()) accounted += s["seconds"].get<double>();
    // Stages partition each forward call's wall time (clock reads between them only).
    CHECK(accounted <= p["wall_seconds"].get<double>() * 1.02 + 1e-4);
    CHECK(accounted >= p["wall_seconds"].get<double>() * 0.5);
  }
  // Decode: one forward call per token, one lm_head each.
  CHECK(doc["decode"]["profile"]["forward_calls"].get<int>() == 4);
  CHECK(doc["decode"]["profile"]["stages"]["lm_head"]["calls"].get<int>() == 4);
  CHECK(doc["decode"]["profile"]["stages"]["router"]["calls"].get<int>() == 4 * tiny_shape().moe_layers);

  auto table = test::run_waste({"bench", test::tokenizer_container().string(), "--threads", "2", "--prompt-tokens",
                                "4", "-n", "2", "--profile"});
  REQUIRE(table.rc == 0);
  CHECK(table.out.find("\ndecode profile (2 tokens)\n") != std::string::npos);
  CHECK(table.out.find("\nprefill profile (4 tokens)\n") != std::string::npos);
}

TEST_CASE("waste bench --compute-only reads nothing while decoding", "[cli][bench]") {
  use_private_runtime_dir();
  const auto doc = test::run_waste_json({"bench", test::tokenizer_container().string(), "--threads", "2", "--prompt-tokens", "4",
                             "-n", "3", "--compute-only", "--json"});
  CHECK(doc["compute_only"].get<bool>());
  for (const char* phase : {"prefill", "decode"}) {
    INFO(phase);
    CHECK(doc[phase]["experts_missed"].get<std::uint64_t>() == 0);
    CHECK(doc[phase]["bytes_read"].get<std::uint64_t>() == 0);
  }
  CHECK(doc["decode"]["experts_hit"].get<std::uint64_t>() == 3 * tiny_shape().per_token);
}

TEST_CASE("waste bench --lookahead sets the prefetch width and never changes the counts asked", "[cli][bench]") {
  use_private_runtime_dir();
  const auto shape = tiny_shape();
  for (const char* width : {"0", "2"}) {
    INFO("lookahead " << width);
    const auto doc = test::run_waste_json({"bench", test::tokenizer_container().string(), "--threads", "2", "--prompt-tokens",
                               "4", "-n", "3", "--lookahead", width, "--in-process", "--cache-records", "64", "--json"});
    CHECK(doc["lookahead"].get<int>() == std::stoi(width));
    const auto& d = doc["decode"];
    CHECK(d["experts_hit"].get<std::uint64_t>() + d["experts_missed"].get<std::uint64_t>() == 3 * shape.per_token);
    if (std::string(width) == "0") CHECK(d["prefetch_issued"].get<std::uint64_t>() == 0);
  }
  auto bad = test::run_waste({"bench", test::tokenizer_container().string(), "--lookahead", "65"});
  CHECK(bad.rc != 0);
}

TEST_CASE("waste bench --record-trace writes every request the run made", "[cli][bench]") {
  use_private_runtime_dir();
  const auto shape = tiny_shape();
  test::ScratchDir dir;
  const auto trace = dir.path() / "trace.txt";
  const auto doc = test::run_waste_json({"bench", test::tokenizer_container().string(), "--threads", "2", "--prompt-tokens", "5",
                             "-n", "3", "--in-process", "--cache-records", "64", "--record-trace", trace.string(), "--json"});
  const auto lines = test::split_lines(test::slurp(trace));
  REQUIRE(!lines.empty());
  CHECK(lines[0].starts_with("# waste expert trace v1"));
  std::uint64_t demand_ids = 0, demand_lines = 0;
  int last_step = -1;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    std::istringstream in(lines[i]);
    std::string kind, ids;
    int step = 0, layer = 0;
    REQUIRE(bool(in >> kind >> step >> layer >> ids));
    CHECK(step >= last_step);
    last_step = step;
    if (kind != "d") continue;
    ++demand_lines;
    demand_ids += std::uint64_t(std::count(ids.begin(), ids.end(), ',') + 1);
  }
  // One prefill chunk (one window: the arena holds every record) plus 3 decode steps, each
  // visiting every MoE layer once.
  CHECK(last_step == 3);
  CHECK(demand_lines == 4u * std::uint64_t(shape.moe_layers));
  // Each id in a request is one demand lookup in the source's counters.
  std::uint64_t counted = 0;
  for (const char* phase : {"prefill", "decode"}) {
    counted += doc[phase]["experts_hit"].get<std::uint64_t>() + doc[phase]["experts_missed"].get<std::uint64_t>();
  }
  CHECK(demand_ids == counted);
}

TEST_CASE("waste bench --io-only replays a trace through waste-ioserver", "[cli][bench][daemon]") {
  use_private_runtime_dir();
  const auto shape = tiny_shape();
  test::ScratchDir dir;
  const auto trace = dir.path() / "trace.txt";
  test::run_waste_json({"bench", test::tokenizer_container().string(), "--threads", "2", "--prompt-tokens", "3", "-n", "4",
            "--lookahead", "0", "--record-trace", trace.string(), "--json"});
  const auto doc = test::run_waste_json({"bench", test::tokenizer_container().string(), "--io-only", "--trace", trace.string(),
                             "--passes", "2", "--json"});
  CHECK(doc["record_bytes"].get<std::uint64_t>() == shape.record);
  const auto& passes = doc["passes"];
  REQUIRE(passes.size() == 2);
  for (const auto& p : passes) {
    CHECK(p["steps"].get<int>() == 5);  // 1 prefill chunk + 4 decode steps
    CHECK(p["layer_requests"].get<int>() == 5 * shape.moe_layers);
    const auto records = p["records"].get<std::uint64_t>();
    CHECK(p["experts_hit"].get<std::uint64_t>() + p["experts_missed"].get<std::uint64_t>() == records);
    CHECK(p["record_latency"]["count"].get<std::uint64_t>() == records);
    CHECK(p["record_latency"]["p50_us"].get<double>() <= p["record_latency"]["p99_us"].get<double>());
    CHECK(p["record_latency"]["p99_us"].get<double>() <= p["record_latency"]["max_us"].get<double>());
    CHECK(p["disk_bytes_read"].get<std::uint64_t>() % shape.record == 0);
    CHECK(p["records_per_second"].get<double>() == Approx(double(records) / p["seconds"].get<double>()));
  }
  CHECK(passes[0]["records"] == passes[1]["records"]);
  // The tiny container fits the daemon's arena: the second pass is all hits, read nothing, and
  // every one of its layers counts as a hit round trip.
  CHECK(passes[1]["experts_missed"].get<std::uint64_t>() == 0);
  CHECK(passes[1]["disk_bytes_read"].get<std::uint64_t>() == 0);
  CHECK(passes[1]["hit_layer_round_trip"]["count"].get<int>() == 5 * shape.moe_layers);
  CHECK(runtime_dir_empty_of_daemons());

  test::write_text(dir.path() / "bad.txt", "# comment\nd 0 1 3,4\nx 1 1 2\n");
  auto bad = test::run_waste({"bench", test::tokenizer_container().string(), "--io-only", "--trace",
                              (dir.path() / "bad.txt").string()});
  CHECK(bad.rc == 1);
  CHECK(bad.err == "waste bench: " + (dir.path() / "bad.txt").string() + ": trace line 3: kind 'x' is not d or p\n");
  auto missing = test::run_waste({"bench", test::tokenizer_container().string(), "--io-only"});
  CHECK(missing.err == "waste bench: --io-only needs --trace FILE (write one with --record-trace)\n");
}

TEST_CASE("waste bench --clients runs N processes on one daemon and sums them", "[cli][bench][daemon]") {
  use_private_runtime_dir();
  const auto shape = tiny_shape();
  const auto doc = test::run_waste_json({"bench", test::tokenizer_container().string(), "--threads", "1", "--prompt-tokens", "3",
                             "-n", "4", "--clients", "2", "--json"});
  REQUIRE(doc["clients"].size() == 2);
  double sum = 0;
  std::set<int> pids;
  for (const auto& c : doc["clients"]) {
    pids.insert(c["pid"].get<int>());
    CHECK(c["decode"]["tokens"].get<int>() == 4);
    CHECK(c["decode"]["experts_hit"].get<std::uint64_t>() + c["decode"]["experts_missed"].get<std::uint64_t>() ==
          4 * shape.per_token);
    sum += c["decode_tokens_per_second"].get<double>();
    // Read by the client itself before its engine closed (the samples may miss a short run).
    const auto& m = c["end_memory"];
    CHECK(m["rss_bytes"].get<std::uint64_t>() > 0);
    CHECK(m["pss_bytes"].get<std::uint64_t>() <= m["rss_bytes"].get<std::uint64_t>());
  }
  CHECK(pids.size() == 2);
  CHECK(doc["aggregate_decode_tokens_per_second"].get<double>() == Approx(sum));
  CHECK(doc["peak_total_pss_bytes"].get<std::uint64_t>() <= doc["peak_total_rss_bytes"].get<std::uint64_t>());
  CHECK(doc["daemon_peak_memory"]["rss_bytes"].get<std::uint64_t>() > 0);
  CHECK(doc["daemon_cpu_seconds"].get<double>() >= 0);
  CHECK(doc["daemon_cpu_seconds"].get<double>() <=
        double(std::thread::hardware_concurrency()) * doc["wall_seconds"].get<double>() + 0.05);
  CHECK(runtime_dir_empty_of_daemons());
}

TEST_CASE("waste bench --sweep writes a table row and a plot point per budget", "[cli][bench]") {
  use_private_runtime_dir();
  test::ScratchDir dir;
  const auto md = dir.path() / "sweep.md", png = dir.path() / "sweep.png";
  const auto doc = test::run_waste_json({"bench", test::tokenizer_container().string(), "--threads", "2", "--prompt-tokens", "3",
                             "-n", "2", "--sweep", "1G,2G", "--sweep-md", md.string(), "--sweep-png", png.string(),
                             "--json"});
  const auto& sweep = doc["sweep"];
  REQUIRE(sweep.size() == 2);
  CHECK(sweep[0]["budget"] == "1G");
  CHECK(sweep[1]["budget"] == "2G");
  CHECK(sweep[0]["budget_bytes"].get<std::uint64_t>() < sweep[1]["budget_bytes"].get<std::uint64_t>());
  // Each point is its own run at that budget: the child reports the budget it resolved.
  CHECK(sweep[0]["report"]["budget_bytes"] == sweep[0]["budget_bytes"]);
  CHECK(sweep[1]["report"]["budget_bytes"] == sweep[1]["budget_bytes"]);
  CHECK(sweep[0]["report"]["cache_records"].get<std::uint64_t>() <=
        sweep[1]["report"]["cache_records"].get<std::uint64_t>());
  const auto rows = test::split_lines(test::slurp(md));
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].starts_with("| budget | cache records |"));
  CHECK(rows[2].starts_with("| 1G | "));
  CHECK(rows[3].starts_with("| 2G | "));
  const std::string image = test::slurp(png);
  REQUIRE(image.size() > 8);
  CHECK(image.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));

  auto bad = test::run_waste({"bench", test::tokenizer_container().string(), "--sweep", "1G,lots"});
  CHECK(bad.rc == 2);  // refused while parsing, before any sweep point runs
  CHECK(bad.err == "waste bench: --sweep: 'lots' is not a size (use e.g. 500M,2G)\n");
}

}  // namespace waste

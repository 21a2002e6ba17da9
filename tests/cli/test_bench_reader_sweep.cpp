// waste bench --reader-sweep (the daemon's readers beside fio's ceiling) and --io-only on a routing
// trace, on the tiny container: the shape of the reports and byte counts against the record size
// (consistency, never speed).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "shared/container/manifest.hpp"

namespace waste {
namespace {

using nlohmann::json;

Manifest tiny_manifest() {
  auto manifest = Manifest::parse(test::slurp(test::tokenizer_container() / "manifest.json"));
  REQUIRE(manifest);
  return *manifest;
}

bool fio_installed() { return std::system("fio --version >/dev/null 2>&1") == 0; }

void use_private_runtime_dir() {
  static test::ScratchDir dir;
  ::setenv("WASTE_RUNTIME_DIR", dir.path().c_str(), 1);
  const auto ioserver = test::waste_bin().parent_path().parent_path() / "ioserver" / "waste-ioserver";
  INFO("needs " << ioserver << " (build the waste-ioserver target)");
  REQUIRE(std::filesystem::exists(ioserver));
  ::setenv("WASTE_IOSERVER", ioserver.c_str(), 1);
  ::setenv("WASTE_LINGER_MS", "200", 1);
}

}  // namespace

TEST_CASE("waste bench --reader-sweep reads whole records at each depth beside fio", "[cli][bench][reader_sweep]") {
  const auto manifest = tiny_manifest();
  const std::uint64_t record = manifest.banks.begin()->second.record_bytes();
  std::uint64_t records_in_container = 0;
  for (const auto& [layer, bank] : manifest.banks) records_in_container += std::uint64_t(bank.experts);
  // Hazard: fio rewrites a file it finds too small for its job; the banks must come out unchanged.
  std::vector<std::string> banks_before;
  for (const auto& [layer, bank] : manifest.banks) banks_before.push_back(test::slurp(test::tokenizer_container() / bank.file));
  // Three records a run, but at least two per reader thread: 3 at depth 1, 4 at depth 2.
  const auto doc = test::run_waste_json({"bench", test::tokenizer_container().string(), "--reader-sweep", "--depths", "1,2",
                             "--run-bytes", std::to_string(3 * record), "--rounds", "2", "--json"});
  CHECK(doc["rounds"].get<int>() == 2);
  CHECK(doc["record_bytes"].get<std::uint64_t>() == record);
  CHECK(doc["container_records"].get<std::uint64_t>() == records_in_container);
  CHECK(doc["load_average"]["before"].size() == 3);
  CHECK(doc["load_average"]["after"].size() == 3);
  const bool fio = fio_installed();
  CHECK(doc["fio"].is_string() == fio);
  const auto& rows = doc["rows"];
  REQUIRE(rows.size() == 2);
  const std::uint64_t expected_records[] = {3, 4};
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& row = rows[i];
    INFO("depth " << row["depth"]);
    CHECK(row["depth"].get<int>() == int(i) + 1);
    for (const char* reader : {"pread", "io_uring", "uring_queue"}) {
      INFO(reader);
      const auto& run = row[reader];
      CHECK(run["records"].get<std::uint64_t>() == expected_records[i]);
      CHECK(run["bytes"].get<std::uint64_t>() == expected_records[i] * record);
      REQUIRE(run["seconds"].get<double>() > 0);
      CHECK(run["gb_per_second"].get<double>() ==
            Approx(double(expected_records[i] * record) / 1e9 / run["seconds"].get<double>()));
      CHECK(run.contains("percent_of_fio") == fio);
      // Two rounds, and the reported run is one of them (the median).
      const auto& samples = row["samples_gb_per_second"][reader];
      REQUIRE(samples.size() == 2);
      CHECK((samples[0] == run["gb_per_second"] || samples[1] == run["gb_per_second"]));
    }
    CHECK(row["samples_gb_per_second"]["fio"].size() == (fio ? 2u : 0u));
    if (fio) {
      CHECK(row["fio"]["bytes"].get<std::uint64_t>() == expected_records[i] * record);
      CHECK(row["pread"]["percent_of_fio"].get<double>() ==
            Approx(100.0 * row["pread"]["gb_per_second"].get<double>() / row["fio"]["gb_per_second"].get<double>()));
    } else {
      CHECK(row["fio"].is_null());
    }
  }
  std::size_t b = 0;
  for (const auto& [layer, bank] : manifest.banks) {
    INFO(bank.file);
    CHECK(test::slurp(test::tokenizer_container() / bank.file) == banks_before[b++]);
  }
  const auto best = doc["best"]["reader"].get<std::string>();
  CHECK((best == "pread" || best == "io_uring"));
  const int depth = doc["best"]["depth"].get<int>();
  CHECK((depth == 1 || depth == 2));

  // --no-fio: our readers only.
  const auto no_fio = test::run_waste_json({"bench", test::tokenizer_container().string(), "--reader-sweep", "--depths", "1",
                                "--run-bytes", "1", "--no-fio", "--json"});
  CHECK(no_fio["fio"].is_null());
  REQUIRE(no_fio["rows"].size() == 1);
  CHECK(no_fio["rows"][0]["pread"]["records"].get<std::uint64_t>() == 2);
  CHECK(no_fio["rows"][0]["fio"].is_null());
}

TEST_CASE("waste bench --reader-sweep refuses a depth the daemon could not run", "[cli][bench][reader_sweep]") {
  // Hazard: depth 0 would wait forever for a free slot; above 64 is beyond --reader-threads.
  for (const char* bad : {"0", "1,65", "2,x", "1,,2"}) {
    INFO(bad);
    const auto ran = test::run_waste({"bench", test::tokenizer_container().string(), "--reader-sweep", "--depths", bad});
    CHECK(ran.rc == 1);
    CHECK(ran.err.rfind("waste bench: --depths: '", 0) == 0);
    CHECK(ran.err.find("' is not a queue depth between 1 and 64\n") != std::string::npos);
  }
}

TEST_CASE("waste bench --io-only replays a routing trace onto the container's MoE layers", "[cli][bench][daemon]") {
  use_private_runtime_dir();
  const auto manifest = tiny_manifest();
  const std::uint64_t record = manifest.banks.begin()->second.record_bytes();
  const int moe_layers = int(manifest.banks.size());
  const int experts = manifest.banks.begin()->second.experts;
  REQUIRE(experts >= 2);
  // Three tokens; token t uses experts {t % E, (t + 1) % E} on every MoE layer.
  test::ScratchDir dir;
  std::string text;
  for (int t = 0; t < 3; ++t) {
    json layers = json::array();
    for (int l = 0; l < moe_layers; ++l) layers.push_back({t % experts, (t + 1) % experts});
    text += json{{"tok", t}, {"layers", layers}}.dump() + "\n";
  }
  test::write_text(dir.path() / "routing.jsonl", text);
  const auto doc = test::run_waste_json({"bench", test::tokenizer_container().string(), "--io-only", "--trace",
                             (dir.path() / "routing.jsonl").string(), "--passes", "1", "--policy", "lru", "--json"});
  CHECK(doc["trace_format"] == "routing");
  CHECK(doc["policy"] == "lru");
  REQUIRE(doc["passes"].size() == 1);
  const auto& p = doc["passes"][0];
  CHECK(p["steps"].get<int>() == 3);
  CHECK(p["layer_requests"].get<int>() == 3 * moe_layers);
  CHECK(p["records"].get<std::uint64_t>() == std::uint64_t(3 * moe_layers * 2));
  const auto read = p["disk_bytes_read"].get<std::uint64_t>();
  CHECK(read % record == 0);
  // Cold arena: every distinct (layer, expert) is read at least once.
  const std::uint64_t distinct = std::uint64_t(moe_layers) * std::uint64_t(std::min(experts, 3));
  CHECK(read >= distinct * record);
  CHECK(p["disk_bytes_per_step"].get<double>() == Approx(double(read) / 3.0));

  // Hazard: a trace of another model would replay on the wrong layers.
  json layers = json::array();
  for (int l = 0; l < moe_layers + 1; ++l) layers.push_back({0, 1});
  test::write_text(dir.path() / "other.jsonl", json{{"tok", 0}, {"layers", layers}}.dump() + "\n");
  const auto other = test::run_waste({"bench", test::tokenizer_container().string(), "--io-only", "--trace",
                                      (dir.path() / "other.jsonl").string()});
  CHECK(other.rc == 1);
  CHECK(other.err == "waste bench: " + (dir.path() / "other.jsonl").string() + ": routing trace has " +
                         std::to_string(moe_layers + 1) + " MoE layers but the container has " +
                         std::to_string(moe_layers) + " expert banks\n");
  // And an id beyond the bank.
  json beyond = json::array();
  for (int l = 0; l < moe_layers; ++l) beyond.push_back({0, experts});
  test::write_text(dir.path() / "beyond.jsonl", json{{"tok", 0}, {"layers", beyond}}.dump() + "\n");
  const auto far = test::run_waste({"bench", test::tokenizer_container().string(), "--io-only", "--trace",
                                    (dir.path() / "beyond.jsonl").string()});
  CHECK(far.rc == 1);
  CHECK(far.err == "waste bench: " + (dir.path() / "beyond.jsonl").string() +
                       ": routing trace token 0 MoE layer 0: expert " + std::to_string(experts) + " is beyond layer " +
                       std::to_string(manifest.banks.begin()->first) + "'s " + std::to_string(experts) +
                       " experts\n");
}

}  // namespace waste

// `waste bench --policy-sim`: the JSON shape and the hand-counted numbers of a small trace.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "ioserver/expert_cache/cache_policy.hpp"
#include "ioserver/bench/policy_sim.hpp"

using namespace waste::test;

TEST_CASE("waste bench --policy-sim --json reports every policy and Belady per capacity", "[cli][bench]") {
  ScratchDir dir;
  const auto trace = dir.path() / "hand.jsonl";
  // One MoE layer, one expert a token: A A B C B A C B A (hit counts in tests/ioserver/test_policy_sim.cpp).
  std::string text;
  for (int id : {0, 0, 1, 2, 1, 0, 2, 1, 0}) text += "{\"layers\": [[" + std::to_string(id) + "]]}\n";
  write_text(trace, text);
  const Ran ran = run_waste({"bench", "--policy-sim", trace.string(), "--capacity", "2,3x", "--json"});
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  const auto j = nlohmann::json::parse(ran.out);
  CHECK(j.size() == 3);
  CHECK(j["working_set"] == 1);
  CHECK(j["clients"] == 1);
  REQUIRE(j["rows"].size() == 2);
  const auto& row = j["rows"][0];
  CHECK(row.size() == 3);
  CHECK(row["capacity"] == 2);
  CHECK(row["multiple"] == 2.0);
  const auto& p = row["policies"];
  CHECK(p.size() == 6);
  CHECK(p["lru"].get<double>() == 2.0 / 9.0);
  CHECK(p["lfru"].get<double>() == 3.0 / 9.0);
  CHECK(p["belady"].get<double>() == 4.0 / 9.0);
  CHECK(p["default"] == p["echo"]);
  // Three slots hold all three experts: only the three first uses miss.
  CHECK(j["rows"][1]["capacity"] == 3);
  for (const char* name : {"lru", "lfru", "reuse", "echo", "default", "belady"}) {
    CHECK(j["rows"][1]["policies"][name].get<double>() == 6.0 / 9.0);
  }
}

TEST_CASE("waste bench --policy-sim refuses a bad capacity and still needs no MODEL", "[cli][bench]") {
  ScratchDir dir;
  const auto trace = dir.path() / "t.jsonl";
  write_text(trace, "{\"layers\": [[1, 2]]}\n");
  const Ran bad = run_waste({"bench", "--policy-sim", trace.string(), "--capacity", "1x,abc"});
  CHECK(bad.rc != 0);
  CHECK(bad.err.find("--capacity: 'abc' is neither a slot count (416) nor a multiple of the working set (0.5x)") !=
        std::string::npos);
  // Hazard: one layer's two pinned experts cannot fit one slot; an error, not a hang or a crash.
  const Ran small = run_waste({"bench", "--policy-sim", trace.string(), "--capacity", "1"});
  CHECK(small.rc != 0);
  CHECK(small.err.find("capacity 1 is below one layer's 2 experts (they are pinned together)") != std::string::npos);
  const Ran no_model = run_waste({"bench"});
  CHECK(no_model.rc != 0);
  CHECK(no_model.err.find("a MODEL is required (except with --policy-sim)") != std::string::npos);
}

TEST_CASE("waste bench --policy-sim --sim-clients 2 interleaves two clients on one cache", "[cli][bench]") {
  const fs::path trace = fs::path(WASTE_SOURCE_DIR) / "tests" / "data" / "routing-olmoe-299tok.jsonl";
  const Ran ran = run_waste({"bench", "--policy-sim", trace.string(), "--capacity", "1x", "--sim-clients", "2", "--json"});
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  const auto j = nlohmann::json::parse(ran.out);
  CHECK(j["clients"] == 2);
  CHECK(j["working_set"] == 128);
  auto parsed = waste::parse_routing_trace(slurp(trace));
  REQUIRE(parsed);
  using waste::CachePolicy;
  for (CachePolicy p : {CachePolicy::lru, CachePolicy::lfru, CachePolicy::reuse, CachePolicy::echo}) {
    const auto r = waste::simulate_policy(*parsed, 128, p, {}, 2);
    REQUIRE(r);
    CHECK(j["rows"][0]["policies"][std::string(waste::cache_policy_name(p))].get<double>() == r->hit_rate());
  }
  const auto best = waste::simulate_belady(*parsed, 128, 2);
  REQUIRE(best);
  CHECK(j["rows"][0]["policies"]["belady"].get<double>() == best->hit_rate());
  const Ran table = run_waste({"bench", "--policy-sim", trace.string(), "--capacity", "1x", "--sim-clients", "2"});
  REQUIRE(table.rc == 0);
  CHECK(table.out.find("2 clients, each a run of the trace's tokens") != std::string::npos);
  const Ran bad = run_waste({"bench", "--policy-sim", trace.string(), "--sim-clients", "0"});
  CHECK(bad.rc != 0);
  CHECK(bad.err.find("--sim-clients") != std::string::npos);
}

// `waste bench --policy-sim`: the JSON shape and the hand-counted numbers of a small trace.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"

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
  CHECK(j.size() == 2);
  CHECK(j["working_set"] == 1);
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

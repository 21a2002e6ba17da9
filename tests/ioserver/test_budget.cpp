#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "shared/memory/budget.hpp"
#include "shared/memory/budget_ledger.hpp"
#include "shared/memory/memory_plan.hpp"
#include "test_control_support.hpp"

using namespace waste;

// The memory plan itself is tested in tests/shared/test_memory_plan.cpp.

TEST_CASE("automatic budget takes floor + k working sets for the largest k in 3,2,1 under the cap",
          "[ioserver][memory]") {
  MemoryPlan plan;
  plan.floor_bytes = 1000;
  plan.working_set_bytes = 100;
  plan.min_expert_cache_bytes = 20;
  plan.max_record_bytes = 10;
  auto pick = [&](std::uint64_t cap) { return resolve_budget(plan, std::nullopt, cap).value(); };
  CHECK(pick(5000).budget_bytes == 1300);
  CHECK(pick(5000).working_sets == 3);
  CHECK(pick(1300).budget_bytes == 1300);
  CHECK(pick(1299).budget_bytes == 1200);
  CHECK(pick(1100).budget_bytes == 1100);
  CHECK(pick(1099).budget_bytes == 1000);
  CHECK(pick(1099).working_sets == 0);
  CHECK_FALSE(pick(1099).above_cap);
  CHECK(pick(900).budget_bytes == 1000);   // the floor even above the cap, with a warning
  CHECK(pick(900).above_cap);
  CHECK(pick(0).budget_bytes == 1300);     // cap unknown
  CHECK(arena_slots(plan, 1300) == (1300 - 1000 + 20) / 10);
  CHECK(expert_cache_bytes(plan, 1000) == 20);
}

TEST_CASE("explicit budget below the floor is refused with both sizes in the message", "[ioserver][memory]") {
  MemoryPlan plan;
  plan.floor_bytes = 1374389535;   // 1.28 GiB, the Kimi-Linear floor
  auto r = resolve_budget(plan, 100ULL << 20, 64ULL << 30);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::ram_budget);
  CHECK(r.error().message == "budget 100.0 MB is below the floor 1.28 GB for this model");
  auto above = resolve_budget(plan, 3ULL << 30, 2ULL << 30);
  REQUIRE(above);
  CHECK(above->budget_bytes == 3ULL << 30);
  CHECK(above->explicit_budget);
  CHECK(above->above_cap);
}

TEST_CASE("byte sizes parse with binary suffixes and print like the reference CLI", "[ioserver][memory]") {
  CHECK(parse_bytes("8G").value() == 8ULL << 30);
  CHECK(parse_bytes("1.5g").value() == 3ULL << 29);
  CHECK(parse_bytes("500M").value() == 500ULL << 20);
  CHECK(parse_bytes("64KiB").value() == 64ULL << 10);
  CHECK(parse_bytes("12345").value() == 12345);
  auto bad = parse_bytes("8X");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "not a byte size: '8X' (use e.g. 8G, 500M, 123456)");
  CHECK_FALSE(parse_bytes("-1G"));
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(12288) == "12.0 KB");
  CHECK(format_bytes(100ULL << 20) == "100.0 MB");
  CHECK(format_bytes(46ULL << 30) == "46.00 GB");
}

TEST_CASE("budget ledger admits clients up to the budget and names budget, used and requested on refusal",
          "[ioserver][memory]") {
  BudgetLedger ledger(10ULL << 20, 2ULL << 20, 4ULL << 20);
  CHECK(ledger.used_bytes() == 6ULL << 20);
  REQUIRE(ledger.reserve(0, 3ULL << 20));
  CHECK(ledger.used_bytes() == 9ULL << 20);
  auto refused = ledger.reserve(1, 2ULL << 20);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::ram_budget);
  CHECK(refused.error().message == "attach refused: budget 10.0 MB, used 9.0 MB, requested 2.0 MB");
  REQUIRE(ledger.reserve(1, 1ULL << 20));   // exactly fills it
  CHECK(ledger.used_bytes() == ledger.budget_bytes());
  ledger.release(0);
  CHECK(ledger.used_bytes() == 7ULL << 20);
  auto shrink = ledger.set_budget(6ULL << 20);
  REQUIRE_FALSE(shrink);
  CHECK(shrink.error().message == "budget 6.0 MB is below what is in use (7.0 MB)");
  REQUIRE(ledger.set_budget(7ULL << 20));
}

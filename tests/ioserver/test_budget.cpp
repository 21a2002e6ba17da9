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

TEST_CASE("automatic budget holds the whole expert set when it fits under the cap, exactly that",
          "[ioserver][memory]") {
  MemoryPlan plan;
  plan.floor_bytes = 1000;
  plan.working_set_bytes = 100;
  plan.min_expert_cache_bytes = 20;
  plan.max_record_bytes = 10;
  plan.expert_records = 30;   // the whole set, 300 bytes of slots, replaces the floor's 20-byte cache
  CHECK(whole_expert_set_budget(plan) == 1000 - 20 + 300);
  auto pick = [&](std::uint64_t cap) { return resolve_budget(plan, std::nullopt, cap).value(); };
  // Fits exactly: the budget is the whole set, not floor + 3 working sets (1300), and its arena
  // holds every record, no more.
  CHECK(pick(1280).budget_bytes == 1280);
  CHECK(pick(1280).whole_expert_set);
  CHECK(pick(1280).working_sets == 0);
  CHECK_FALSE(pick(1280).above_cap);
  CHECK(arena_slots(plan, 1280) == 30);
  CHECK(pick(64ULL << 30).budget_bytes == 1280);   // a large machine takes no more
  // One byte short: floor + k working sets as before.
  CHECK(pick(1279).budget_bytes == 1200);
  CHECK(pick(1279).working_sets == 2);
  CHECK_FALSE(pick(1279).whole_expert_set);
  // Cap unknown (0): floor + 3 working sets, never the whole set (nothing says it fits).
  CHECK(pick(0).budget_bytes == 1300);
  CHECK_FALSE(pick(0).whole_expert_set);
  // A whole set larger than floor + 3 working sets: taken when it fits, else 3 working sets.
  plan.expert_records = 50;
  CHECK(pick(1480).budget_bytes == 1480);
  CHECK(pick(1480).whole_expert_set);
  CHECK(pick(1479).budget_bytes == 1300);
  CHECK(pick(1479).working_sets == 3);
  // An explicit budget is unchanged, even one that would hold the whole set.
  auto given = resolve_budget(plan, 5000, 64ULL << 30).value();
  CHECK(given.budget_bytes == 5000);
  CHECK(given.explicit_budget);
  CHECK_FALSE(given.whole_expert_set);
  // No records (a dense container): no whole set, the working-set rule.
  plan.expert_records = 0;
  CHECK(whole_expert_set_budget(plan) == 0);
  CHECK(pick(64ULL << 30).budget_bytes == 1300);
  // Fewer records than the floor's minimal cache: the floor itself holds them all.
  plan.expert_records = 1;
  CHECK(whole_expert_set_budget(plan) == 1000);
  CHECK(pick(1000).whole_expert_set);
  CHECK(automatic_budget(1000, 100, 1280, 1280).whole_expert_set);
  CHECK(automatic_budget(1000, 100, 1280, 1279).bytes == 1200);
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

TEST_CASE("budget ledger admits N clients by shrinking the cache toward its floor, refuses below it",
          "[ioserver][memory]") {
  constexpr std::uint64_t MB = 1ULL << 20;
  BudgetLedger ledger(LedgerShape{"/m/tiny", 10 * MB, 2 * MB, MB, 4, 2});
  CHECK(ledger.usable_slots() == 4);
  CHECK(ledger.used_bytes() == 6 * MB);
  auto first = ledger.admit(0, 100, 3 * MB);
  REQUIRE(first);
  CHECK(*first == 4);   // room beside the whole arena: the cache keeps every slot
  auto second = ledger.admit(1, 101, 3 * MB);
  REQUIRE(second);
  CHECK(*second == 2);  // admitted by shrinking the cache to its floor, not refused
  CHECK(ledger.used_bytes() == ledger.budget_bytes());
  // Hazard: a third client would push the cache below its floor (2·top_k records).
  auto refused = ledger.admit(2, 102, MB);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::ram_budget);
  CHECK(refused.error().message ==
        "attach refused for /m/tiny: budget 10.0 MB holds trunk 2.0 MB + expert cache floor 2 slots (2.0 MB) + "
        "client state 6.0 MB (client 0 pid 100: 3.0 MB, client 1 pid 101: 3.0 MB); requested 1.0 MB, at most 0 B "
        "fits (a budget of 11.0 MB would hold it)");
  CHECK(ledger.usable_slots() == 2);   // the refusal changed nothing
  auto twice = ledger.admit(0, 100, MB);
  REQUIRE_FALSE(twice);
  CHECK(twice.error().message == "client 0 already holds a reservation");
  CHECK(ledger.release(1) == 4);       // the cache grows back, up to the arena
  auto shrink = ledger.set_budget(6 * MB);
  REQUIRE_FALSE(shrink);
  CHECK(shrink.error().message ==
        "budget 6.0 MB cannot hold the trunk, the expert cache floor and the attached clients' state (7.0 MB)");
  REQUIRE(ledger.set_budget(7 * MB));
  CHECK(ledger.usable_slots() == 2);
}

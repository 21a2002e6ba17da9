// waste plan: every figure against the §4.1 formulas computed here from the manifest (the trunk
// as the image TrunkLayout packs, the state as RunState holds it).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "shared/container/manifest.hpp"
#include "shared/container/trunk.hpp"
#include "shared/memory/budget.hpp"
#include "shared/memory/memory_plan.hpp"

namespace waste {
namespace {

Manifest tiny_manifest() {
  auto manifest = Manifest::parse(test::slurp(test::tokenizer_container() / "manifest.json"));
  REQUIRE(manifest);
  return *manifest;
}

// The text line "name  bytes  (human)" -> bytes.
std::uint64_t line_bytes(const std::string& out, const std::string& name) {
  for (const auto& line : test::split_lines(out)) {
    std::istringstream in(line);
    std::string key;
    std::uint64_t value = 0;
    if (in >> key >> value && key == name) return value;
  }
  FAIL("no line " << name << " in\n" << out);
  return 0;
}

}  // namespace

TEST_CASE("waste plan reports the reference memory plan", "[cli][plan]") {
  const Manifest m = tiny_manifest();
  const ModelConfig& c = m.config;
  // Resident tensors, each payload + scales on a 64-byte boundary (quantised embed_tokens on disk).
  std::uint64_t trunk = 0;
  for (const auto& t : m.trunk) {
    if (!(t.quantized() && t.name.ends_with("embed_tokens.weight"))) trunk = (trunk + t.bytes + 63) / 64 * 64;
  }
  CHECK(trunk == TrunkLayout::plan(m).image_bytes);
  const std::uint64_t rec = m.banks.begin()->second.record_bytes();
  REQUIRE(rec > 0);
  for (const int ctx : {4096, 100}) {
    INFO("ctx " << ctx);
    // tiny: KDA layers 0, 1, 3 (H 4, D 32, C 128, K 4) and MLA layer 2 (kv_lora 32 + rope 8).
    REQUIRE(c.n_kda_layers() == 3);
    // ... plus the last token's residual stream (hidden floats), which RunState also holds.
    const std::uint64_t state =
        3ull * 4 * 32 * 32 * 4 + 3ull * 3 * 3 * 128 * 4 + 1ull * ctx * 40 * 4 + std::uint64_t(c.hidden) * 4;
    const std::uint64_t min_cache = rec * 2 * 2;
    const std::uint64_t ws = rec * 2 * 4;

    auto ran = test::run_waste({"plan", test::tokenizer_container().string(), "--ctx", std::to_string(ctx), "--json"});
    INFO(ran.err);
    REQUIRE(ran.rc == 0);
    const auto doc = nlohmann::json::parse(ran.out);
    CHECK(doc["trunk_bytes"].get<std::uint64_t>() == trunk);
    CHECK(doc["state_bytes"].get<std::uint64_t>() == state);
    CHECK(doc["record_bytes"].get<std::uint64_t>() == rec);
    CHECK(doc["min_expert_cache_bytes"].get<std::uint64_t>() == min_cache);
    CHECK(doc["working_set_bytes"].get<std::uint64_t>() == ws);
    const std::uint64_t scratch = doc["scratch_bytes"].get<std::uint64_t>();
    CHECK(scratch > 0);
    const std::uint64_t floor = trunk + state + scratch + min_cache;
    CHECK(doc["floor_bytes"].get<std::uint64_t>() == floor);
    CHECK(doc["recommended_bytes"].get<std::uint64_t>() == floor + 3 * ws);
    // This machine has far more than the tiny model needs: automatic = the whole expert set, the
    // floor with one slot per record in place of its minimal cache.
    std::uint64_t records = 0;
    for (const auto& [layer, bank] : m.banks) records += std::uint64_t(bank.experts);
    const std::uint64_t whole = floor - min_cache + records * m.max_record_bytes();
    CHECK(doc["expert_records"].get<std::uint64_t>() == records);
    CHECK(doc["whole_expert_set_bytes"].get<std::uint64_t>() == whole);
    CHECK(doc["budget_bytes"].get<std::uint64_t>() == whole);
    CHECK(doc["budget_whole_expert_set"].get<bool>());
    CHECK(doc["budget_working_sets"].get<int>() == 0);
    CHECK(doc["expert_cache_bytes"].get<std::uint64_t>() == records * m.max_record_bytes());
    CHECK(doc["cache_slots"].get<std::uint64_t>() == records);

    // The text form carries the same numbers.
    ran = test::run_waste({"plan", test::tokenizer_container().string(), "--ctx", std::to_string(ctx)});
    REQUIRE(ran.rc == 0);
    CHECK(test::split_lines(ran.out).at(0) ==
          "memory plan for " + test::tokenizer_container().string() + " at ctx " + std::to_string(ctx));
    CHECK(line_bytes(ran.out, "trunk") == trunk);
    CHECK(line_bytes(ran.out, "state") == state);
    CHECK(line_bytes(ran.out, "scratch") == scratch);
    CHECK(line_bytes(ran.out, "min_expert_cache") == min_cache);
    CHECK(line_bytes(ran.out, "floor") == floor);
    CHECK(line_bytes(ran.out, "working_set") == ws);
    CHECK(line_bytes(ran.out, "recommended") == floor + 3 * ws);
    CHECK(line_bytes(ran.out, "whole_expert_set") == whole);
    CHECK(line_bytes(ran.out, "budget") == whole);
    CHECK(test::split_lines(ran.out).back() ==
          "budget automatic: the whole expert set (" + std::to_string(records) + " records)");
  }
}

TEST_CASE("waste plan --prefill-chunk plans the scratch of that chunk, 1..512", "[cli][plan]") {
  const std::string model = test::tokenizer_container().string();
  auto ran = test::run_waste({"plan", model, "--prefill-chunk", "512", "--json"});
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  const auto doc = nlohmann::json::parse(ran.out);
  CHECK(doc["prefill_chunk"].get<int>() == 512);
  auto at512 = plan_memory(test::tokenizer_container(), kDefaultCtxTokens, 512);
  auto at64 = plan_memory(test::tokenizer_container());
  REQUIRE(at512);
  REQUIRE(at64);
  CHECK(doc["scratch_bytes"].get<std::uint64_t>() == at512->scratch_bytes);
  CHECK(at512->scratch_bytes > at64->scratch_bytes);
  ran = test::run_waste({"plan", model, "--prefill-chunk", "513"});
  CHECK(ran.rc != 0);
  CHECK(ran.err == "waste plan: --prefill-chunk must be between 1 and 512\n");
}

TEST_CASE("waste plan refuses a budget below the floor", "[cli][plan]") {
  auto ran = test::run_waste({"plan", test::tokenizer_container().string(), "--json"});
  REQUIRE(ran.rc == 0);
  const auto floor = nlohmann::json::parse(ran.out)["floor_bytes"].get<std::uint64_t>();
  ran = test::run_waste({"plan", test::tokenizer_container().string(), "--budget", "10k"});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste plan: budget 10.0 KB is below the floor " + format_bytes(floor) + " for this model\n");
  ran = test::run_waste({"plan", test::tokenizer_container().string(), "--budget", std::to_string(floor), "--json"});
  REQUIRE(ran.rc == 0);
  const auto doc = nlohmann::json::parse(ran.out);
  CHECK(doc["budget_bytes"].get<std::uint64_t>() == floor);
  CHECK(doc["budget_explicit"].get<bool>());
  CHECK(doc["expert_cache_bytes"].get<std::uint64_t>() == doc["min_expert_cache_bytes"].get<std::uint64_t>());
}

}  // namespace waste

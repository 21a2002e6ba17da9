#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "shared/memory/budget.hpp"
#include "shared/memory/budget_ledger.hpp"
#include "shared/memory/memory_plan.hpp"
#include "test_control_support.hpp"

using namespace waste;

namespace {

// The tiny synthetic model's config (waste-v0-reference.md §7) with a hand-made trunk index.
const char* kTinyManifest = R"({
  "format_version": 0, "arch": "kimi-linear", "tensor_prefix": "",
  "config": {"hidden_size": 128, "num_hidden_layers": 4, "first_k_dense_replace": 1, "intermediate_size": 256,
             "moe_intermediate_size": 64, "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 1,
             "num_attention_heads": 4, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
             "kv_lora_rank": 32, "q_lora_rank": null, "vocab_size": 256,
             "linear_attn_config": {"head_dim": 32, "num_heads": 4, "short_conv_kernel_size": 4, "kda_layers": [1, 2, 4]}},
  "expert_quant": {"fmt": "VQ3R", "stages": 3, "vec_dim": 8, "entries": 256},
  "layers": {"1": {"file": "experts-L1.bin", "experts": 8, "bytes": 98304, "codebook_base": 0},
             "2": {"file": "experts-L2.bin", "experts": 8, "bytes": 98304, "codebook_base": 9},
             "3": {"file": "experts-L3.bin", "experts": 8, "bytes": 98304, "codebook_base": 18}},
  "trunk": [{"name": "model.embed_tokens.weight", "fmt": 2, "bytes": 33280},
            {"name": "model.norm.weight", "fmt": 0, "bytes": 512},
            {"name": "model.layers.0.mlp.gate_proj.weight", "fmt": 3, "bytes": 17408},
            {"name": "lm_head.weight", "fmt": 2, "bytes": 33280}]
})";

// §4.1 by hand for that config at ctx 4096.
constexpr std::uint64_t kTinyState = 3ULL * 4 * 32 * 32 * 4      // KDA S: 3 layers x H x D x D
                                     + 3ULL * 3 * 3 * 4 * 32 * 4 // conv rings: 3 x 3 x (K-1) x H x D
                                     + 1ULL * 4096 * (32 + 8) * 4;  // one MLA layer's latent + rope
// Scratch, item by item (decode buffers, attention row 16384+1024 floats, logits, LUTs of
// 17 x 3 x 256 entries for decode (3), chunk (129), per-expert (2), their int8 shadows, chunk buffers).
constexpr std::uint64_t kTinyScratch = 98304 + 2048 + 69632 + 1024 + 16384 + 1536 + 2560 + 98304 + 6737152 +
                                       156672 + 39192 + 1685320 + 2048 + 104448 + 26128 + 65792 + 131072 +
                                       131072 + 98304 + 65536 + 49152;

}  // namespace

TEST_CASE("memory plan of the tiny model matches the hand-computed section 4.1 numbers", "[ioserver][memory]") {
  auto plan = plan_memory(std::string_view(kTinyManifest));
  REQUIRE(plan);
  CHECK(plan->trunk_bytes == 512 + 17408 + 33280);   // quantised embed_tokens stays on disk
  CHECK(plan->vision_bytes == 0);
  CHECK(plan->state_bytes == kTinyState);
  CHECK(plan->state_bytes == 718336);
  CHECK(plan->scratch_bytes == kTinyScratch);
  CHECK(plan->record_bytes == 12288);
  CHECK(plan->min_expert_cache_bytes == 12288 * 2 * 2);
  CHECK(plan->working_set_bytes == 12288 * 2 * 4);   // n_layers counts the dense layer
  CHECK(plan->floor_bytes == 51200 + kTinyState + kTinyScratch + 49152);
  CHECK(plan->recommended_bytes == plan->floor_bytes + 3 * 98304);
  CHECK(plan->client_bytes() == kTinyState + kTinyScratch);
}

TEST_CASE("memory plan of a synthesized tiny container sums its real trunk index", "[ioserver][memory]") {
  test::TempDir t("plan");
  const auto dir = test::make_tiny_container(t.path);
  if (dir.empty()) {
    WARN("waste synth not available; skipped");
    return;
  }
  std::ifstream in(dir / "manifest.json");
  const auto manifest = nlohmann::json::parse(in);
  std::uint64_t trunk = 0;
  for (const auto& e : manifest["trunk"]) {
    if (e["name"].get<std::string>().find("embed_tokens") == std::string::npos) trunk += e["bytes"].get<std::uint64_t>();
  }
  auto plan = plan_memory(dir);
  REQUIRE(plan);
  CHECK(plan->trunk_bytes == trunk);
  CHECK(plan->state_bytes == kTinyState);
  CHECK(plan->scratch_bytes == kTinyScratch);
  CHECK(plan->floor_bytes == trunk + kTinyState + kTinyScratch + 49152);
}

TEST_CASE("memory plan: prefix splits vision tensors out, first bank in file order sizes the floor",
          "[ioserver][memory]") {
  const char* text = R"({"tensor_prefix": "language_model.",
    "config": {"num_hidden_layers": 2, "hidden_size": 8, "num_experts_per_token": 1},
    "layers": {"5": {"experts": 2, "bytes": 200}, "1": {"experts": 2, "bytes": 400}},
    "trunk": [{"name": "language_model.model.norm.weight", "fmt": 0, "bytes": 32},
              {"name": "language_model.model.embed_tokens.weight", "fmt": 0, "bytes": 64},
              {"name": "vision_tower.encoder.layers.0.fc0.weight", "fmt": 2, "bytes": 1000}]})";
  auto plan = plan_memory(std::string_view(text));
  REQUIRE(plan);
  CHECK(plan->trunk_bytes == 32 + 64);   // an F32 embedding is resident
  CHECK(plan->vision_bytes == 1000);
  CHECK(plan->record_bytes == 100);      // "5" comes first in the file
  CHECK(plan->max_record_bytes == 200);
  CHECK(plan->min_expert_cache_bytes == 200);
}

TEST_CASE("memory plan refuses bad manifests with the key named", "[ioserver][memory]") {
  auto bad_json = plan_memory(std::string_view("{not json"));
  REQUIRE_FALSE(bad_json);
  CHECK(bad_json.error().message == "manifest.json is not a JSON object");
  auto bad_stages = plan_memory(std::string_view(R"({"expert_quant": {"stages": 9}})"));
  REQUIRE_FALSE(bad_stages);
  CHECK(bad_stages.error().code == Errc::format);
  CHECK(bad_stages.error().message == "expert_quant.stages: 9 is out of range 1..8");
  auto missing = plan_memory(std::filesystem::path("/nonexistent/model.waste"));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message == "/nonexistent/model.waste/manifest.json: cannot open");
}

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

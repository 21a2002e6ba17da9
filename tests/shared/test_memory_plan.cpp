// The memory plan (waste-v0-reference.md §4.1) computed from the validated manifest: every
// figure of the tiny model by hand, item by item, and bad manifests refused as the engine would.
// (Moved here from tests/ioserver/test_budget.cpp when the plan stopped parsing manifests itself.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "shared/container/manifest.hpp"
#include "shared/memory/client_sizing.hpp"
#include "shared/memory/memory_plan.hpp"
#include "shared/synth/synth.hpp"
#include "temp_dir.hpp"

using namespace waste;
using nlohmann::json;

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::filesystem::path write_preset(const test::TempDir& dir, const std::string& preset) {
  synth::SynthRequest req;
  req.preset = preset;
  auto spec = synth::make_spec(req);
  REQUIRE(spec.has_value());
  REQUIRE(synth::write_container(*spec, dir.path()).has_value());
  return dir.path();
}

// The trunk image by hand: resident tensors (under the prefix, not a quantised embed_tokens),
// each payload + scales rounded up to 64 bytes.
std::uint64_t image_bytes(const json& manifest) {
  const std::string prefix = manifest.value("tensor_prefix", std::string());
  std::uint64_t total = 0;
  for (const auto& e : manifest["trunk"]) {
    const std::string name = e["name"];
    if (!name.starts_with(prefix)) continue;
    if (e["fmt"].get<int>() != 0 && name.ends_with("embed_tokens.weight")) continue;
    total = (total + e["bytes"].get<std::uint64_t>() + 63) / 64 * 64;
  }
  return total;
}

// tiny (configs/presets/tiny.json): hidden 128, 4 layers (KDA 0, 1, 3: H 4, D 32, K 4; MLA 2:
// kv_lora 32 + rope 8, 4 heads, nope 16, v 16), dense layer 0 (inter 256), MoE 1..3 (8 experts,
// top-2, inter 64, one shared expert), vocab 256, VQ3R (3 stages x 256 entries, vec_dim 8).
std::uint64_t tiny_state(std::uint64_t ctx) {
  return 4 * (3 * (4 * 32 * 32)       // KDA S per layer
              + 3 * 3 * (128 * 3)     // three conv rings of C x (K-1) per KDA layer
              + 1 * ctx * 40          // the MLA layer's latent + rope cache
              + 128);                 // residual stream of the last token (no AttnRes)
}
// `T`: the chunk buffers' tokens (max(prefill_chunk, 64)); the gate/up LUT rows stay at 64.
std::uint64_t tiny_scratch(std::uint64_t ctx, std::uint64_t T = 64) {
  const std::uint64_t L = std::min<std::uint64_t>(T, 64);
  const std::uint64_t mla = 4 * (T * 4 * 24 + T * 40 + 4 * T * 32 + 4 * 32 /* ctx_sum */ + 2 * 4 * ctx + 2 * T * 4 * 16);
  const std::uint64_t kda = 4 * (6 * T * 128 + T * 32 + T * 4);
  const std::uint64_t lut_in = 16 * 3 * 256, lut_down = 8 * 3 * 256;  // 256-entry stage tables
  const std::uint64_t moe = 8 * (5 * 4 + 1 * 2) + 2 * (4 + 4) + 3 * 128 * 4 + 64 * 4 + (2 * lut_in + lut_down) * 4 +
                            2 * 64 * 4 + 2 * 128 * 4 + 128 * 4;
  const std::uint64_t prefill_moe = T * 2 * (4 + 4 + 4) + T * 4 /* LUT row per token */ + 2 * L * lut_in * 4 + T * 2 * 128 * 4 + 8 * 2 * 4 + 9 * 4 +
                                    T * 8 * 4 + T * 128 * 4 + 2 * T * 256 * 4 +
                                    2 * T * (128 + 64) * 4;  // matrix-product rows: x and y (lat), gate and up
  const std::uint64_t forward = 4 * (5 * 128 + 2 * 256 + 1 + 5 * T * 128) + T + T;  // live and prompt flags
  const std::uint64_t logits = 256 * 4;
  return mla + kda + moe + prefill_moe + forward + logits;
}

}  // namespace

TEST_CASE("memory plan of the tiny model matches the hand-computed numbers", "[shared][memory]") {
  test::TempDir dir("plan-tiny");
  const auto path = write_preset(dir, "tiny");
  const json manifest = json::parse(slurp(path / "manifest.json"));
  for (const std::uint32_t ctx : {4096u, 100u}) {
    INFO("ctx " << ctx);
    auto plan = plan_memory(path, ctx);
    INFO((plan ? std::string() : plan.error().message));
    REQUIRE(plan);
    CHECK(plan->trunk_bytes == image_bytes(manifest));
    CHECK(plan->vision_bytes == 0);
    CHECK(plan->state_bytes == tiny_state(ctx));
    CHECK(plan->scratch_bytes == tiny_scratch(ctx));
    CHECK(plan->record_bytes == 12288);
    CHECK(plan->max_record_bytes == 12288);
    CHECK(plan->top_k == 2);
    CHECK(plan->n_layers == 4);
    CHECK(plan->min_expert_cache_bytes == 12288 * 2 * 2);
    CHECK(plan->working_set_bytes == 12288 * 2 * 4);   // n_layers counts the dense layer
    CHECK(plan->floor_bytes == plan->trunk_bytes + tiny_state(ctx) + tiny_scratch(ctx) + 12288 * 2 * 2);
    CHECK(plan->recommended_bytes == plan->floor_bytes + 3 * 12288 * 2 * 4);
    CHECK(plan->client_bytes() == tiny_state(ctx) + tiny_scratch(ctx));
    // The whole expert set: every bank's records, counted from the manifest's "layers".
    std::uint64_t records = 0;
    for (const auto& bank : manifest["layers"]) records += bank["experts"].get<std::uint64_t>();
    CHECK(records > 0);
    CHECK(plan->expert_records == records);
    // The text overload gives the same plan.
    auto from_text = plan_memory(std::string_view(slurp(path / "manifest.json")), ctx);
    REQUIRE(from_text);
    CHECK(from_text->floor_bytes == plan->floor_bytes);
    // Prefill chunks: buffers of max(chunk, 64) tokens, 64 gate/up LUT rows whatever the chunk.
    for (const int chunk : {1, 64, 128, 512}) {
      INFO("prefill chunk " << chunk);
      auto at = plan_memory(path, ctx, chunk);
      REQUIRE(at);
      CHECK(at->scratch_bytes == tiny_scratch(ctx, std::uint64_t(std::max(chunk, 64))));
      CHECK(at->state_bytes == tiny_state(ctx));
    }
    for (const int chunk : {0, 513}) {
      auto refused = plan_memory(std::string_view(slurp(path / "manifest.json")), ctx, chunk);
      REQUIRE_FALSE(refused);
      CHECK(refused.error().message == "prefill_chunk " + std::to_string(chunk) + " must be 1..512");
    }
  }
}

TEST_CASE("memory plan: tensors outside the prefix are vision bytes, not trunk", "[shared][memory]") {
  test::TempDir dir("plan-k3");
  const auto path = write_preset(dir, "tiny-k3");   // prefix language_model. and a vision stub
  const json manifest = json::parse(slurp(path / "manifest.json"));
  std::uint64_t vision = 0;
  for (const auto& e : manifest["trunk"]) {
    if (!e["name"].get<std::string>().starts_with("language_model.")) vision += e["bytes"].get<std::uint64_t>();
  }
  REQUIRE(vision > 0);
  auto plan = plan_memory(path);
  REQUIRE(plan);
  CHECK(plan->vision_bytes == vision);
  CHECK(plan->trunk_bytes == image_bytes(manifest));
}

TEST_CASE("hazard: a manifest the engine refuses must not get a plan from lenient defaults", "[shared][memory]") {
  auto bad_json = plan_memory(std::string_view("{not json"));
  REQUIRE_FALSE(bad_json);
  CHECK(bad_json.error().message == "manifest.json is not valid JSON");
  test::TempDir dir("plan-bad");
  const auto path = write_preset(dir, "tiny");
  json m = json::parse(slurp(path / "manifest.json"));
  json bad = m;
  bad["expert_quant"]["stages"] = 9;
  auto bad_stages = plan_memory(std::string_view(bad.dump()));
  REQUIRE_FALSE(bad_stages);
  CHECK(bad_stages.error().code == Errc::format);
  CHECK(bad_stages.error().message == "expert_quant.stages: 9 is out of range 1..8");
  // The old planner read num_experts_per_token with a fallback of 8; the config has no default.
  bad = m;
  bad["config"].erase("num_experts_per_token");
  auto no_top_k = plan_memory(std::string_view(bad.dump()));
  REQUIRE_FALSE(no_top_k);
  CHECK(no_top_k.error().message == "config: num_experts > 0 needs num_experts_per_token >= 1");
  auto missing = plan_memory(std::filesystem::path("/nonexistent/model.waste"));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message ==
        "/nonexistent/model.waste does not exist (a model is a NAME.waste directory: make one with `waste synth` or "
        "`waste convert`)");
}

TEST_CASE("client sizing: LUT buffers use 2^index_bits entries per stage, not entries", "[shared][memory]") {
  test::TempDir dir("plan-entries");
  synth::SynthRequest req;
  req.preset = "tiny";
  auto spec = synth::make_spec(req);
  REQUIRE(spec.has_value());
  spec->skeleton.quant.entries = 200;
  REQUIRE(synth::write_container(*spec, dir.path()).has_value());
  auto m = Manifest::parse(slurp(dir.path() / "manifest.json"));
  REQUIRE(m);
  auto g = ExpertGeometry::from(m->config, m->quant);
  REQUIRE(g);
  CHECK(sizing::lut_floats(*g, 0) == 16 * 3 * 256);
  CHECK(sizing::lut_floats(*g, 2) == 8 * 3 * 256);
  auto plan = plan_memory(dir.path());
  REQUIRE(plan);
  CHECK(plan->scratch_bytes == tiny_scratch(4096));   // same as the 256-entry container
}

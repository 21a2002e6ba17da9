// waste bench --floor on the tiny container: the floor model's inputs and sums, checked against
// the manifest and the run's own profile (consistency, never speed).
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "compute/model/decode_head.hpp"
#include "shared/container/manifest.hpp"

namespace waste {
namespace {

using nlohmann::json;

TEST_CASE("waste bench --floor: trunk bytes from the manifest, stage floors that sum to the step's floor", "[cli][bench]") {
  const auto model = test::tokenizer_container();
  auto manifest = Manifest::parse(test::slurp(model / "manifest.json"));
  REQUIRE(manifest);
  const ModelConfig& c = manifest->config;
  auto ran = test::run_waste({"bench", model.string(), "--threads", "2", "--prompt-tokens", "4", "-n", "3",
                              "--compute-only", "--in-process", "--floor", "--json"});
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  const json doc = json::parse(ran.out);
  REQUIRE(doc.contains("floor"));
  const json& f = doc["floor"];

  // Every trunk tensor but the embedding is read once per decoded token; lm_head (with the final
  // norm) is its own stage, and where the engine makes a decode copy of lm_head (the q6 default
  // under the int8 decode rule) decode rows read the copy's bytes instead of the stored matrix's.
  std::uint64_t total = 0, lm_head = 0, lm_matrix = 0;
  for (const TrunkTensorInfo& t : manifest->trunk) {
    if (t.name.find("embed_tokens") != std::string::npos) continue;
    total += t.bytes;
    if (t.name == "lm_head.weight" || t.name == "model.norm.weight") lm_head += t.bytes;
    if (t.name == "lm_head.weight") lm_matrix = t.bytes;
  }
  if (const std::uint64_t copy = model::decode_head_copy_bytes(*manifest); copy > 0) {
    INFO("the copy is smaller than the stored Q8G matrix");
    CHECK(copy < lm_matrix);
    total = total - lm_matrix + copy;
    lm_head = lm_head - lm_matrix + copy;
  }
  CHECK(f["trunk_bytes_per_token"]["total"].get<std::uint64_t>() == total);
  CHECK(f["trunk_bytes_per_token"]["lm_head"].get<std::uint64_t>() == lm_head);

  const json& rates = f["rates"];
  CHECK(rates["threads"].get<int>() == 2);
  for (const char* key : {"stream_gbs", "lookups_per_ns", "pair_apply_us", "gateup_build_us", "down_build_us",
                          "kda_head_step_us"}) {
    INFO(key);
    CHECK(rates[key].get<double>() > 0);
  }

  // The stages, in order; their floors sum to the step's floor, and the measured side is the
  // decode profile of the same run.
  std::vector<std::string> names;
  double sum = 0;
  for (const json& s : f["stages"]) {
    names.push_back(s["stage"].get<std::string>());
    sum += s["floor_ms"].get<double>();
  }
  CHECK(names == std::vector<std::string>{"experts", "lm_head", "attn_kda", "attn_mla", "shared_ffn", "router", "other"});
  CHECK(f["floor_ms"].get<double>() == Approx(sum).epsilon(1e-12));
  const json& decode = doc["decode"];
  const int tokens = decode["tokens"].get<int>();
  REQUIRE(tokens == 3);
  CHECK(f["step_ms"].get<double>() == Approx(decode["seconds"].get<double>() * 1e3 / tokens).epsilon(1e-12));
  CHECK(f["ratio"].get<double>() == Approx(f["floor_ms"].get<double>() / f["step_ms"].get<double>()).epsilon(1e-12));
  const json& stages = decode["profile"]["stages"];
  const double experts_measured =
      (stages["expert_matmul"]["seconds"].get<double>() + stages["lut_build"]["seconds"].get<double>()) * 1e3 / tokens;
  CHECK(f["stages"][0]["measured_ms"].get<double>() == Approx(experts_measured).epsilon(1e-12));
  CHECK(f["stages"][1]["measured_ms"].get<double>() ==
        Approx(stages["lm_head"]["seconds"].get<double>() * 1e3 / tokens).epsilon(1e-12));

  // The experts' floor: top_k x MoE layers applies, plus the LUT builds split over the threads.
  const double pairs = double(c.top_k) * c.n_moe_layers();
  const double experts_floor = pairs * rates["pair_apply_us"].get<double>() / 1e3 +
                               (c.n_moe_layers() * rates["gateup_build_us"].get<double>() +
                                pairs * rates["down_build_us"].get<double>()) / 2 / 1e3;
  CHECK(f["stages"][0]["floor_ms"].get<double>() == Approx(experts_floor).epsilon(1e-12));
  // lm_head's floor is its bytes at the measured streaming rate.
  CHECK(f["stages"][1]["floor_ms"].get<double>() ==
        Approx(double(lm_head) / (rates["stream_gbs"].get<double>() * 1e6)).epsilon(1e-12));
}

TEST_CASE("waste bench --floor measures the expert rates with the tables decode uses (--lut f32 or q16)", "[cli][bench]") {
  const auto model = test::tokenizer_container();
  auto manifest = Manifest::parse(test::slurp(model / "manifest.json"));
  REQUIRE(manifest);
  const bool vq4p = manifest->quant.packed6();
  for (const char* mode : {"f32", "q16"}) {
    INFO(mode);
    auto ran = test::run_waste({"bench", model.string(), "--threads", "1", "--prompt-tokens", "2", "-n", "2",
                                "--compute-only", "--in-process", "--floor", "--json", "--lut", mode});
    INFO(ran.err);
    REQUIRE(ran.rc == 0);
    const json doc = json::parse(ran.out);
    // VQ4P experts have int8 tables of their own whatever the mode; VQ3R's follow it.
    CHECK(doc["floor"]["rates"]["lut"].get<std::string>() == (vq4p ? std::string("int8") : std::string(mode)));
    CHECK(doc["floor"]["rates"]["lookups_per_ns"].get<double>() > 0);
  }
}

TEST_CASE("waste bench --floor without --compute-only is refused with the flag to add", "[cli][bench]") {
  auto ran = test::run_waste({"bench", test::tokenizer_container().string(), "--in-process", "--floor", "-n", "2"});
  CHECK(ran.rc != 0);
  CHECK(ran.err == "waste bench: --floor compares the compute floor with a compute-only step: add --compute-only\n");
}

}  // namespace
}  // namespace waste

// waste plan --preset / --config: the plan of the container `waste synth` would write, computed
// without writing it (synth::plan_manifest), against `waste plan` on the container synth does
// write with the same options: every line but the first (which names the source) and every
// JSON key but "source" and "model" must be equal. And synth::plan_manifest's manifest against
// the manifest.json write_container commits, text for text.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "shared/synth/synth.hpp"

namespace waste {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// `shape`: synth's options naming the container (--preset NAME or --config FILE, --layers ...);
// `title`: what the planned text's first line must read up to " at ctx 4096".
void check_plan_matches_synth(const std::vector<std::string>& shape, const std::string& title) {
  test::ScratchDir scratch;
  const fs::path out = scratch.path() / "m.waste";
  auto ran = test::run_waste(concat(concat({"synth"}, shape), {"--out", out.string()}));
  INFO(ran.err);
  REQUIRE(ran.rc == 0);

  const std::vector<std::string> ctx = {"--ctx", "4096"};
  const auto from_container = test::run_waste(concat({"plan", out.string()}, ctx));
  const auto planned = test::run_waste(concat(concat({"plan"}, shape), ctx));
  INFO(from_container.err << planned.err);
  REQUIRE(from_container.rc == 0);
  REQUIRE(planned.rc == 0);
  const auto a = test::split_lines(from_container.out);
  const auto b = test::split_lines(planned.out);
  REQUIRE(a.size() > 8);
  CHECK(a.at(0) == "memory plan for " + out.string() + " at ctx 4096");
  CHECK(b.at(0) == title + " at ctx 4096");
  CHECK(std::vector<std::string>(a.begin() + 1, a.end()) == std::vector<std::string>(b.begin() + 1, b.end()));

  auto ja = test::run_waste_json(concat({"plan", out.string(), "--json"}, ctx));
  auto jb = test::run_waste_json(concat(concat({"plan", "--json"}, shape), ctx));
  CHECK(ja["source"] == "container");
  CHECK(ja["model"] == out.string());
  CHECK(jb["source"] == (shape.at(0) == "--preset" ? "preset" : "config"));
  CHECK(jb["model"] == shape.at(1));
  CHECK(ja["floor_bytes"].get<std::uint64_t>() > 0);
  for (auto* j : {&ja, &jb}) {
    j->erase("source");
    j->erase("model");
  }
  CHECK(ja.dump(1) == jb.dump(1));
}

}  // namespace

TEST_CASE("waste plan --preset prints the plan of the container waste synth would write", "[cli][plan]") {
  check_plan_matches_synth({"--preset", "tiny"},
                           "memory plan for preset tiny (planned from the preset, not read from a container)");
  check_plan_matches_synth({"--preset", "tiny-v3"},
                           "memory plan for preset tiny-v3 (planned from the preset, not read from a container)");
  check_plan_matches_synth({"--preset", "tiny-glm", "--experts", "vq4p", "--trunk", "q8g"},
                           "memory plan for preset tiny-glm (planned from the preset, not read from a container)");
  check_plan_matches_synth({"--preset", "tiny-k3", "--tokenizer", "--layers", "3"},
                           "memory plan for preset tiny-k3 --layers 3 (planned from the preset, not read from a "
                           "container)");
}

TEST_CASE("waste plan --preset plans kimi-linear's real shapes (2 layers) as synth writes them", "[cli][plan]") {
  check_plan_matches_synth({"--preset", "kimi-linear", "--layers", "2"},
                           "memory plan for preset kimi-linear --layers 2 (planned from the preset, not read from a "
                           "container)");
}

TEST_CASE("waste plan --config plans tiny-v41 with Engram on as synth writes it", "[cli][plan]") {
  // tiny-v41 with an Engram table on layer 1 (test_v41_run.cpp's shape); the row cap makes synth
  // draw smaller primes. The tables are not in the manifest, so the plan does not change with them.
  test::ScratchDir scratch;
  auto preset = synth::load_preset("tiny-v41");
  REQUIRE(preset);
  nlohmann::json j = *preset;
  j["engram_layer_ids"] = {1};
  j["engram_num_embeddings"] = {240};
  j["engram_vocab_size"] = 50;
  j["engram_max_ngram_size"] = 3;
  j["engram_n_heads"] = 2;
  j["engram_head_dim"] = 32;
  j["engram_pad_id"] = 2;
  j["engram_compressed_vocab_size"] = 200;
  const fs::path config = scratch.path() / "tiny-v41-engram.json";
  std::ofstream(config) << j.dump(1);
  const std::string title =
      "memory plan for config " + config.string() + " (planned from the config, not read from a container)";
  check_plan_matches_synth({"--config", config.string(), "--engram-rows", "200", "--engram-bits", "4"}, title);
  check_plan_matches_synth({"--config", config.string(), "--engram-rows", "200", "--layers", "3"},
                           "memory plan for config " + config.string() +
                               " --layers 3 (planned from the config, not read from a container)");
  // Engram on: its trunk tensors and buffers are planned (the figures differ from tiny-v41's).
  const auto with = test::run_waste_json({"plan", "--config", config.string(), "--json"});
  const auto without = test::run_waste_json({"plan", "--preset", "tiny-v41", "--json"});
  CHECK(with["trunk_bytes"].get<std::uint64_t>() > without["trunk_bytes"].get<std::uint64_t>());
  CHECK(with["scratch_bytes"].get<std::uint64_t>() > without["scratch_bytes"].get<std::uint64_t>());
}

TEST_CASE("waste plan --preset refuses a second source, an unknown preset, synth options with a container",
          "[cli][plan]") {
  const std::string model = test::tokenizer_container().string();
  auto ran = test::run_waste({"plan", model, "--preset", "tiny"});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste plan: give exactly one of MODEL, --preset or --config\n");
  CHECK(ran.out.empty());
  ran = test::run_waste({"plan", "--preset", "tiny", "--config", "c.json"});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste plan: give exactly one of MODEL, --preset or --config\n");
  ran = test::run_waste({"plan"});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste plan: give exactly one of MODEL, --preset or --config\n");
  ran = test::run_waste({"plan", "--preset", "no-such-model"});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste plan: no preset \"no-such-model\" (looked for " +
                       (synth::presets_dir() / "no-such-model.json").string() + ")\n");
  ran = test::run_waste({"plan", "--preset", "../tiny"});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste plan: preset name \"../tiny\" is not a plain name\n");
  ran = test::run_waste({"plan", "--preset", "tiny", "--layers", "5"});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste plan: --layers 5 is out of range 1..4\n");
  ran = test::run_waste({"plan", model, "--layers", "2"});
  CHECK(ran.rc == 1);
  CHECK(ran.err == "waste plan: --layers plans a synthetic container: it needs --preset or --config, not MODEL\n");
  ran = test::run_waste({"plan", model, "--engram-rows", "10"});
  CHECK(ran.rc == 1);
  CHECK(ran.err ==
        "waste plan: --engram-rows plans a synthetic container: it needs --preset or --config, not MODEL\n");
  ran = test::run_waste({"plan", "--preset", "tiny", "--engram-bits", "6"});
  CHECK(ran.rc == 2);
  CHECK(ran.err == "waste plan: --engram-bits must be one of 4, 8\n");
}

TEST_CASE("synth::plan_manifest is the manifest write_container commits", "[cli][plan][synth]") {
  for (const std::string name : {"tiny", "tiny-k3", "tiny-v3", "tiny-k2", "tiny-glm", "tiny-v41"}) {
    for (const int layers : {0, 2}) {
      INFO(name << " --layers " << layers);
      synth::SynthRequest request;
      request.preset = name;
      request.layers = layers;
      if (name == "tiny-v3") request.experts = "vq4p";
      auto spec = synth::make_spec(request);
      INFO((spec ? std::string() : spec.error().message));
      REQUIRE(spec);
      auto planned = synth::plan_manifest(*spec);
      INFO((planned ? std::string() : planned.error().message));
      REQUIRE(planned);
      test::ScratchDir scratch;
      REQUIRE(synth::write_container(*spec, scratch.path()));
      CHECK(planned->to_json_text() == test::slurp(scratch.path() / "manifest.json"));
    }
  }
}

TEST_CASE("waste synth --help and waste plan --help list every preset in configs/presets", "[cli][plan][synth]") {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(fs::path(WASTE_SOURCE_DIR) / "configs" / "presets")) {
    if (e.path().extension() == ".json") files.push_back(e.path().stem().string());
  }
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 12);
  CHECK(synth::preset_names() == files);
  std::string list;
  for (const auto& f : files) list += (list.empty() ? "" : ", ") + f;
  CHECK(synth::preset_list() == list);
  for (const char* command : {"synth", "plan"}) {
    INFO(command);
    const auto ran = test::run_waste({command, "--help"});
    REQUIRE(ran.rc == 0);
    // CLI11 wraps long descriptions: compare with the whitespace runs folded to one space.
    std::string folded;
    for (char ch : ran.out) {
      const bool space = ch == ' ' || ch == '\n';
      if (space && (folded.empty() || folded.back() == ' ')) continue;
      folded += space ? ' ' : ch;
    }
    CHECK(folded.find(list) != std::string::npos);
    for (const char* name : {"tiny-glm", "tiny-v41", "deepseek-v4.1-flash", "glm-5.3-flash"}) {
      CHECK(folded.find(name) != std::string::npos);
    }
  }
}

}  // namespace waste

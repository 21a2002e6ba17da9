// waste synth --vision: the tower at the real shapes, outside the text prefix, and vision.json.
#include <catch2/catch.hpp>

#include "compute/vision/vision_config.hpp"
#include "compute/vision/vision_weights.hpp"
#include "shared/container/container.hpp"
#include "shared/container/trunk.hpp"
#include "shared/synth/synth.hpp"
#include "../shared/temp_dir.hpp"

using namespace waste;

namespace {

synth::SynthRequest vision_request(int layers) {
  synth::SynthRequest req;
  req.preset = "tiny-k3";
  req.seed = 5;
  req.vision = true;
  req.vision_layers = layers;
  return req;
}

const TrunkTensorInfo* entry(const Manifest& m, const std::string& name) {
  for (const auto& t : m.trunk) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("synth --vision writes the tower at the release shapes, Q8G matrices and F32 norms", "[vision][synth]") {
  test::TempDir dir("vision-synth");
  auto spec = synth::make_spec(vision_request(2));
  REQUIRE(spec.has_value());
  REQUIRE(synth::write_container(*spec, dir.path()).has_value());
  auto info = ContainerInfo::open(dir.path());
  REQUIRE(info.has_value());
  const Manifest& m = info->manifest;
  struct Want { const char* name; std::vector<std::int64_t> shape; TensorFormat fmt; };
  const std::vector<Want> want = {
      {"vision_tower.patch_embed.proj.weight", {1024, 588}, TensorFormat::q8g},
      {"vision_tower.patch_embed.pos_emb.weight", {4096, 1024}, TensorFormat::q8g},
      {"vision_tower.encoder.blocks.1.norm0.weight", {1024}, TensorFormat::f32},
      {"vision_tower.encoder.blocks.1.wqkv.weight", {4608, 1024}, TensorFormat::q8g},
      {"vision_tower.encoder.blocks.1.wo.weight", {1024, 1536}, TensorFormat::q8g},
      {"vision_tower.encoder.blocks.1.mlp.fc0.weight", {4096, 1024}, TensorFormat::q8g},
      {"vision_tower.encoder.blocks.1.mlp.fc1.weight", {1024, 4096}, TensorFormat::q8g},
      {"vision_tower.encoder.final_layernorm.weight", {1024}, TensorFormat::f32},
      {"mm_projector.proj.0.weight", {4096, 4096}, TensorFormat::q8g},
      {"mm_projector.proj.2.weight", {128, 4096}, TensorFormat::q8g},  // tiny-k3's text width
      {"mm_projector.post_norm.weight", {128}, TensorFormat::f32},
  };
  for (const Want& w : want) {
    INFO(w.name);
    const TrunkTensorInfo* t = entry(m, w.name);
    REQUIRE(t != nullptr);
    CHECK(t->shape == w.shape);
    CHECK(t->fmt == w.fmt);
  }
  CHECK(entry(m, "vision_tower.encoder.blocks.2.wo.weight") == nullptr);  // only the 2 asked for
  // Outside the prefix: not part of the resident trunk image.
  const TrunkLayout layout = TrunkLayout::plan(m);
  for (std::size_t i = 0; i < m.trunk.size(); ++i) {
    if (m.trunk[i].name.starts_with("vision_tower.") || m.trunk[i].name.starts_with("mm_projector.")) {
      CHECK(layout.image_offset[i] == TrunkLayout::kNotResident);
    }
  }
  auto config = vision::VisionConfig::load(dir.path());
  REQUIRE(config.has_value());
  CHECK(config->hidden == 1024);
  CHECK(config->heads == 12);
  CHECK(config->qkv_hidden == 1536);
  CHECK(config->inter == 4096);
  CHECK(config->layers == 2);
  CHECK(config->text_hidden == 128);
  CHECK(config->max_patches == 1024);
  CHECK(config->media_pad_id == 163605);
  auto weights = vision::VisionWeights::load(dir.path(), m, *config);
  REQUIRE(weights.has_value());
  CHECK(weights->blocks.size() == 2);
  CHECK(weights->pos_grid.size() == std::size_t(64 * 64 * 1024));
}

TEST_CASE("synth --vision refuses a model without a tensor prefix and a layer count outside 1..27",
          "[vision][synth]") {
  auto req = vision_request(2);
  req.preset = "tiny";
  auto spec = synth::make_spec(req);
  REQUIRE_FALSE(spec.has_value());
  CHECK(spec.error().message ==
        "--vision needs a model with a tensor prefix (a nested text_config, e.g. kimi-k3 or tiny-k3): the tower "
        "must sit outside the text trunk");
  auto bad = synth::make_spec(vision_request(28));
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message == "--vision-layers 28 is out of range 1..27");
}

TEST_CASE("a tower tensor missing from the manifest is an error naming it", "[vision][synth]") {
  test::TempDir dir("vision-missing");
  auto spec = synth::make_spec(vision_request(1));
  REQUIRE(spec.has_value());
  REQUIRE(synth::write_container(*spec, dir.path()).has_value());
  auto info = ContainerInfo::open(dir.path());
  REQUIRE(info.has_value());
  Manifest m = info->manifest;
  std::erase_if(m.trunk, [](const TrunkTensorInfo& t) { return t.name == "mm_projector.post_norm.weight"; });
  auto config = vision::VisionConfig::load(dir.path());
  REQUIRE(config.has_value());
  auto weights = vision::VisionWeights::load(dir.path(), m, *config);
  REQUIRE_FALSE(weights.has_value());
  CHECK(weights.error().message == "vision tensor mm_projector.post_norm.weight: missing from the manifest");
}

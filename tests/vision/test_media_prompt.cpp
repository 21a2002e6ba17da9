// Media positions in the prompt: the block layout, and the engine fed the tower's rows there.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "compute/api/engine.hpp"
#include "compute/tokenizer/tokenizer.hpp"
#include "compute/vision/media_prompt.hpp"
#include "shared/container/container.hpp"
#include "shared/container/trunk.hpp"
#include "shared/synth/synth.hpp"
#include "../shared/temp_dir.hpp"

using namespace waste;
using namespace waste::vision;

namespace {

// tiny-k3 with the synthetic tokenizer and a 1-block real-shape tower, written once.
const std::filesystem::path& container() {
  static test::TempDir dir("media");
  static const bool written = [] {
    synth::SynthRequest req;
    req.preset = "tiny-k3";
    req.seed = 9;
    req.tokenizer = true;
    req.vision = true;
    req.vision_layers = 1;
    auto spec = synth::make_spec(req);
    REQUIRE(spec.has_value());
    REQUIRE(synth::write_container(*spec, dir.path()).has_value());
    return true;
  }();
  (void)written;
  return dir.path();
}

std::unique_ptr<Engine> open(int chunk) {
  EngineOptions o;
  o.model = container();
  o.threads = 2;
  o.ctx_tokens = 128;
  o.prefill_chunk = chunk;
  auto e = Engine::open(o);
  REQUIRE(e.has_value());
  return std::move(*e);
}

RgbImage gradient(int w, int h) {
  RgbImage img;
  img.width = w;
  img.height = h;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) img.pixels.insert(img.pixels.end(), {std::uint8_t(4 * x), std::uint8_t(7 * y), 90});
  return img;
}

float max_diff(std::span<const float> a, std::span<const float> b) {
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace

TEST_CASE("the media block wraps one pad per merged patch, with the tower rows at the pads", "[vision][media]") {
  auto tok = Tokenizer::load(container());
  REQUIRE(tok.has_value());
  auto media = MediaTokens::from(*tok);
  REQUIRE(media.has_value());
  CHECK(media->pad == *tok->special_id("<|media_pad|>"));
  EncodedImage img;
  img.width = 30;
  img.height = 20;
  img.grid = {4, 2};  // 2 merged positions
  img.rows = {1, 2, 3, 4, 5, 6, 7, 8};  // hidden 4
  const std::vector<int> prompt = {11, 12, 13};
  const MediaPrompt p = insert_media(*tok, *media, prompt, 1, std::span(&img, 1), 4);
  std::vector<int> want = {11, media->begin};
  tok->encode("image 30x20", want);
  want.push_back(media->content);
  const std::size_t first_pad = want.size();
  want.insert(want.end(), {media->pad, media->pad, media->end, 12, 13});
  CHECK(p.tokens == want);
  REQUIRE(p.embeddings.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO(i);
    if (i == first_pad) {
      CHECK(p.embeddings[i] == img.rows.data());
    } else if (i == first_pad + 1) {
      CHECK(p.embeddings[i] == img.rows.data() + 4);
    } else {
      CHECK(p.embeddings[i] == nullptr);
    }
  }
  CHECK(media_block_text(30, 20) == "<|media_begin|>image 30x20<|media_content|><|media_pad|><|media_end|>");
}

TEST_CASE("an embedding override equal to embed_tokens gives the same logits bit for bit", "[vision][media]") {
  // The injection path itself: feeding each token's own table row must change nothing.
  auto info = ContainerInfo::open(container());
  REQUIRE(info.has_value());
  auto trunk = Trunk::load(container(), info->manifest);
  REQUIRE(trunk.has_value());
  const TrunkTensor* embed = trunk->find("model.embed_tokens.weight");
  REQUIRE(embed != nullptr);
  const std::vector<int> tokens = {5, 9, 44, 7, 100, 3};
  const int H = info->manifest.config.hidden;
  std::vector<float> rows(tokens.size() * std::size_t(H));
  std::vector<const float*> ptrs;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    REQUIRE(trunk->read_row(*embed, tokens[t], std::span(rows.data() + t * H, std::size_t(H))).has_value());
    ptrs.push_back(t % 2 == 0 ? rows.data() + t * H : nullptr);
  }
  for (int chunk : {64, 1}) {
    INFO("prefill chunk " << chunk);
    auto plain = open(chunk);
    auto a = plain->eval(tokens);
    REQUIRE(a.has_value());
    const std::vector<float> want(a->begin(), a->end());
    auto over = open(chunk);
    auto b = over->eval(tokens, ptrs);
    REQUIRE(b.has_value());
    CHECK(std::equal(want.begin(), want.end(), b->begin()));
  }
}

TEST_CASE("an image's rows at the media positions move the logits, prefill and step agree", "[vision][media]") {
  auto engine = open(64);
  auto info = ContainerInfo::open(container());
  REQUIRE(info.has_value());
  auto tower = VisionTower::load(container(), info->manifest);
  REQUIRE(tower.has_value());
  auto tok = Tokenizer::load(container());
  REQUIRE(tok.has_value());
  auto media = MediaTokens::from(*tok);
  REQUIRE(media.has_value());
  // 84x56 -> 6x4 patches -> 6 merged positions.
  auto img = encode_image(*tower, engine->exec(), gradient(84, 56));
  REQUIRE(img.has_value());
  CHECK(img->positions() == 6);
  CHECK(img->rows.size() == 6u * 128u);
  const std::vector<int> text = tok->encode("what is this?");
  const MediaPrompt p = insert_media(*tok, *media, text, 0, std::span(&*img, 1), 128);
  auto with_image = engine->eval(p.tokens, p.embeddings);
  REQUIRE(with_image.has_value());
  const std::vector<float> chunked(with_image->begin(), with_image->end());

  auto stepped_engine = open(1);
  auto stepped = stepped_engine->eval(p.tokens, p.embeddings);
  REQUIRE(stepped.has_value());
  // Prefill and decode differ by float rounding only (reference §3.10: 6.7e-6 on K3 logits).
  CHECK(max_diff(chunked, *stepped) < 1e-4f);

  // Hazard: the pads fed as ordinary embed_tokens rows (the image ignored).
  auto blind_engine = open(64);
  auto blind = blind_engine->eval(p.tokens);
  REQUIRE(blind.has_value());
  CHECK(max_diff(chunked, *blind) > 1e-2f);

  auto bad = engine->eval(p.tokens, std::span(p.embeddings).first(3));
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message == "eval: 3 embedding rows for " + std::to_string(p.tokens.size()) + " tokens");
}

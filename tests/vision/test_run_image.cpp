// `waste run MODEL "text" --image FILE`: the CLI's greedy tokens equal the engine API fed the
// same media rows, and bad images / modes are refused with the file named.
#include <catch2/catch.hpp>

#include <png.h>

#include <cstring>

#include "../cli/cli_test_support.hpp"
#include "compute/api/engine.hpp"
#include "compute/tokenizer/tokenizer.hpp"
#include "compute/vision/image_decode.hpp"
#include "compute/vision/media_prompt.hpp"
#include "shared/container/container.hpp"

using namespace waste;

namespace {

void write_png(const std::filesystem::path& path, int w, int h) {
  std::vector<std::uint8_t> px;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) px.insert(px.end(), {std::uint8_t(3 * x), std::uint8_t(5 * y), std::uint8_t(x ^ y)});
  png_image p;
  std::memset(&p, 0, sizeof p);
  p.version = PNG_IMAGE_VERSION;
  p.width = png_uint_32(w);
  p.height = png_uint_32(h);
  p.format = PNG_FORMAT_RGB;
  REQUIRE(png_image_write_to_file(&p, path.c_str(), 0, px.data(), 0, nullptr));
}

}  // namespace

TEST_CASE("waste run --image: the tokens of the engine fed the tower rows at the media positions",
          "[vision][cli]") {
  test::ScratchDir dir;
  const auto model = dir.path() / "m.waste";
  auto synth = test::run_waste({"synth", "--preset", "tiny-k3", "--tokenizer", "--vision", "--vision-layers", "1",
                                "--seed", "4", "--out", model.string()});
  INFO(synth.err);
  REQUIRE(synth.rc == 0);
  const auto image = dir.path() / "img.png";
  write_png(image, 84, 56);  // 6x4 patches, 6 prompt positions
  const std::string prompt = "describe";
  auto ran = test::run_waste({"run", model.string(), prompt, "--image", image.string(), "--threads", "2", "--ctx",
                              "128", "-n", "4", "--temp", "0", "--ignore-eos", "--json"});
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  const auto doc = nlohmann::json::parse(ran.out);

  // The reference: the engine API, the same image decoded and encoded, the same prompt.
  EngineOptions o;
  o.model = model;
  o.threads = 2;
  o.ctx_tokens = 128;
  auto engine = Engine::open(o);
  REQUIRE(engine.has_value());
  auto tok = Tokenizer::load(model);
  REQUIRE(tok.has_value());
  auto info = ContainerInfo::open(model);
  REQUIRE(info.has_value());
  auto tower = vision::VisionTower::load(model, info->manifest);
  REQUIRE(tower.has_value());
  auto pixels = vision::decode_image_file(image);
  REQUIRE(pixels.has_value());
  auto encoded = vision::encode_image(*tower, (*engine)->exec(), *pixels);
  REQUIRE(encoded.has_value());
  auto media = vision::MediaTokens::from(*tok);
  REQUIRE(media.has_value());
  const vision::MediaPrompt p = vision::insert_media(*tok, *media, tok->encode(prompt), 0,
                                                     std::span(&*encoded, 1), 128);
  GenerateParams params;
  params.max_tokens = 4;
  params.eos_token = -2;
  params.prompt_embeddings = p.embeddings;
  auto want = (*engine)->generate(p.tokens, params);
  REQUIRE(want.has_value());
  CHECK(doc["tokens"].get<std::vector<int>>() == want->tokens);
  CHECK(doc["stats"]["prompt_tokens"].get<int>() == int(p.tokens.size()));
  CHECK(std::count(p.tokens.begin(), p.tokens.end(), media->pad) == 6);
}

TEST_CASE("waste run --image refuses a missing file, a non-image and --ids mode", "[vision][cli]") {
  test::ScratchDir dir;
  const auto model = dir.path() / "m.waste";
  REQUIRE(test::run_waste({"synth", "--preset", "tiny-k3", "--tokenizer", "--vision", "--vision-layers", "1",
                           "--out", model.string()}).rc == 0);
  const auto junk = dir.path() / "junk.png";
  test::write_text(junk, "not an image at all");
  auto bad = test::run_waste({"run", model.string(), "hi", "--image", junk.string()});
  CHECK(bad.rc != 0);
  CHECK(bad.err.find(junk.string() + ": not a PNG or JPEG image") != std::string::npos);
  const auto none = dir.path() / "none.png";
  auto missing = test::run_waste({"run", model.string(), "hi", "--image", none.string()});
  CHECK(missing.rc != 0);
  CHECK(missing.err.find(none.string()) != std::string::npos);
  auto ids = test::run_waste({"run", model.string(), "--ids", "1,2", "--image", junk.string()});
  CHECK(ids.rc != 0);
  CHECK(ids.err.find("--image needs a prompt text (text mode), not --ids") != std::string::npos);
}

// `/image FILE` in `waste chat`: the next turn carries the image, exactly as `waste run --image`.
#include <catch2/catch.hpp>

#include <png.h>

#include <cstring>

#include "../cli/cli_test_support.hpp"

using namespace waste;

namespace {

void write_png(const std::filesystem::path& path, int w, int h) {
  std::vector<std::uint8_t> px;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) px.insert(px.end(), {std::uint8_t(7 * x), std::uint8_t(2 * y), std::uint8_t(x + y)});
  png_image p;
  std::memset(&p, 0, sizeof p);
  p.version = PNG_IMAGE_VERSION;
  p.width = png_uint_32(w);
  p.height = png_uint_32(h);
  p.format = PNG_FORMAT_RGB;
  REQUIRE(png_image_write_to_file(&p, path.c_str(), 0, px.data(), 0, nullptr));
}

}  // namespace

TEST_CASE("waste chat /image: the next reply is the one waste run --image gives", "[vision][cli][chat]") {
  test::ScratchDir dir;
  const auto model = dir.path() / "m.waste";
  const std::string format = std::string(WASTE_SOURCE_DIR) + "/configs/chat/kimi-k3.json";
  auto synth = test::run_waste({"synth", "--preset", "tiny-k3", "--tokenizer", "--vision", "--vision-layers", "1",
                                "--seed", "6", "--out", model.string()});
  INFO(synth.err);
  REQUIRE(synth.rc == 0);
  const auto image = dir.path() / "img.png";
  write_png(image, 84, 56);
  const std::vector<std::string> common = {"--threads", "2", "--ctx", "256", "-n", "6", "--temp", "0",
                                           "--chat-format", format, "-q"};
  std::vector<std::string> run = {"run", model.string(), "what is it", "--image", image.string()};
  run.insert(run.end(), common.begin(), common.end());
  auto want = test::run_waste(run);
  INFO(want.err);
  REQUIRE(want.rc == 0);
  std::vector<std::string> chat = {"chat", model.string()};
  chat.insert(chat.end(), common.begin(), common.end());
  const auto missing = (dir.path() / "none.png").string();
  auto got = test::run_waste(chat, "/image " + missing + "\n/image " + image.string() + "\nwhat is it\n");
  INFO(got.err);
  REQUIRE(got.rc == 0);
  CHECK(got.err.find("[image " + image.string() + ": 84x56, 6 positions in the next turn]") != std::string::npos);
  CHECK(got.err.find(missing) != std::string::npos);  // the bad one is reported, the chat goes on
  CHECK(got.out == want.out);
}

// The tower's intermediates for the PyTorch oracle (tests/reference/vision_oracle.py):
//   waste-dump-vision CONTAINER RGB_FILE WIDTH HEIGHT OUT_DIR
// RGB_FILE is raw 8-bit RGB (WIDTH x HEIGHT x 3). Writes OUT_DIR/grid.json ({gw, gh, stride}),
// patches.f32 ([patches][3*p*p], the preprocessed input), embed.f32 ([patches][D], patch
// embedding + position grid) and out.f32 ([merged][text_hidden], the projector output), and
// prints the tower's per-stage seconds as one JSON line (docs/PERFORMANCE.md's benchmark).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "compute/kernels/kernels.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "compute/vision/preprocess.hpp"
#include "compute/vision/tower.hpp"
#include "shared/container/container.hpp"
#include "shared/container/file_io.hpp"

using namespace waste;

namespace {

bool write_floats(const std::filesystem::path& p, const float* data, std::size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(data), std::streamsize(n * sizeof(float)));
  return bool(f);
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "waste-dump-vision: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) return fail("usage: waste-dump-vision CONTAINER RGB_FILE WIDTH HEIGHT OUT_DIR");
  const std::filesystem::path dir = argv[1], out = argv[5];
  vision::RgbImage image;
  image.width = std::stoi(argv[3]);
  image.height = std::stoi(argv[4]);
  auto raw = read_text_file(argv[2], 1u << 28);
  if (!raw) return fail(raw.error().message);
  image.pixels.assign(raw->begin(), raw->end());
  auto info = ContainerInfo::open(dir);
  if (!info) return fail(info.error().message);
  auto tower = vision::VisionTower::load(dir, info->manifest);
  if (!tower) return fail(tower.error().message);
  auto patches = vision::preprocess(image, tower->config());
  if (!patches) return fail(patches.error().message);
  ThreadPool pool(2);
  forward::Exec exec{pool, kernels::active()};
  const auto embed = tower->embed(exec, *patches);
  vision::TowerTimings timings;
  auto result = tower->encode(exec, *patches, &timings);
  if (!result) return fail(result.error().message);
  std::filesystem::create_directories(out);
  const int L = patches->grid.patches(), pv = tower->config().patch_values();
  std::vector<float> compact(std::size_t(L) * pv);
  for (int i = 0; i < L; ++i) {
    std::copy_n(patches->data.begin() + std::ptrdiff_t(i) * patches->stride, pv, compact.begin() + std::ptrdiff_t(i) * pv);
  }
  std::printf("{\"patches\": %d, \"layers\": %d, \"embed\": %.3f, \"norms\": %.3f, \"qkv\": %.3f, "
              "\"rope\": %.3f, \"attention\": %.3f, \"wo\": %.3f, \"mlp\": %.3f, \"merge_project\": %.3f, "
              "\"total\": %.3f}\n",
              patches->grid.patches(), tower->config().layers, timings.embed, timings.norms, timings.qkv,
              timings.rope, timings.attention, timings.wo, timings.mlp, timings.merge_project, timings.total());
  std::ofstream(out / "grid.json") << "{\"gw\": " << patches->grid.gw << ", \"gh\": " << patches->grid.gh
                                   << ", \"seconds\": " << timings.total() << "}\n";
  if (!write_floats(out / "patches.f32", compact.data(), compact.size()) ||
      !write_floats(out / "embed.f32", embed.data(), embed.size()) ||
      !write_floats(out / "out.f32", result->data(), result->size())) {
    return fail("cannot write to " + out.string());
  }
  return 0;
}

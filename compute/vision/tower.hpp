// The K3 vision tower (MoonViT) and its projector: patches in, one text-width embedding per
// merged 2x2 patch out (reference §3.11). Every matrix product runs over all patches at once
// through the trunk matmul kernel on the shared thread pool; attention is two matmuls per head
// (scores against the keys, then the softmaxed rows against the transposed values).
#pragma once

#include <array>
#include <filesystem>
#include <vector>

#include "compute/forward/ops.hpp"
#include "compute/vision/preprocess.hpp"
#include "compute/vision/vision_config.hpp"
#include "compute/vision/vision_weights.hpp"
#include "shared/container/manifest.hpp"
#include "shared/result.hpp"

namespace waste::vision {

// Seconds per stage of the last encode (benchmarks, `waste run --verbose`).
struct TowerTimings {
  double embed = 0, norms = 0, qkv = 0, rope = 0, attention = 0, wo = 0, mlp = 0, merge_project = 0;
  [[nodiscard]] double total() const { return embed + norms + qkv + rope + attention + wo + mlp + merge_project; }
};

class VisionTower {
 public:
  // vision.json and the tower's tensors of the container in `dir`.
  static Result<VisionTower> load(const std::filesystem::path& dir, const Manifest& manifest);
  VisionTower(VisionConfig config, VisionWeights weights) : config_(config), weights_(std::move(weights)) {}

  // [patches.grid.merged()][text_hidden] row-major, rows in merged-grid raster order.
  Result<std::vector<float>> encode(const forward::Exec& exec, const Patches& patches,
                                    TowerTimings* timings = nullptr) const;
  // The patch embedding plus the resized position grid, [patches][D] (stage check).
  std::vector<float> embed(const forward::Exec& exec, const Patches& patches) const;

  [[nodiscard]] const VisionConfig& config() const { return config_; }
  [[nodiscard]] const VisionWeights& weights() const { return weights_; }

 private:
  VisionConfig config_;
  VisionWeights weights_;
};

}  // namespace waste::vision

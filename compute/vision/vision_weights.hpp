// The tower's tensors (vision_tower.*, mm_projector.*), which sit outside the text trunk's
// prefix and so are never in the trunk image: read from trunk.bin into private buffers when a
// tower is loaded (only when a caller wants images), and handed to the trunk kernels as
// QuantMatrix views. Names and shapes as the reference converter writes them (reference §3.11).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "compute/kernels/kernels.hpp"
#include "compute/vision/vision_config.hpp"
#include "shared/container/manifest.hpp"
#include "shared/result.hpp"

namespace waste::vision {

struct VisionBlockWeights {
  std::vector<float> norm0, norm1;      // [D]
  kernels::QuantMatrix wqkv{};          // [3*Q, D], rows q | k | v, each [heads][head_dim]
  kernels::QuantMatrix wo{};            // [D, Q]
  kernels::QuantMatrix fc0{};           // [I, D]
  kernels::QuantMatrix fc1{};           // [D, I]
};

class VisionWeights {
 public:
  // Every tensor must be present with its shape; errors name the tensor and the container.
  static Result<VisionWeights> load(const std::filesystem::path& container_dir, const Manifest& manifest,
                                    const VisionConfig& config);

  kernels::QuantMatrix patch_embed{};   // [D, 3*p*p]
  std::vector<float> pos_grid;          // [pos_h][pos_w][D], dequantised once at load
  std::vector<VisionBlockWeights> blocks;
  std::vector<float> final_norm;        // [D]
  kernels::QuantMatrix proj0{};         // [4D, 4D]
  kernels::QuantMatrix proj2{};         // [text_hidden, 4D]
  std::vector<float> post_norm;         // [text_hidden]
  [[nodiscard]] std::uint64_t bytes() const { return bytes_; }

 private:
  // Payload and scale bytes the QuantMatrix views point into (stable: never resized after load).
  std::vector<std::unique_ptr<std::uint8_t[]>> storage_;
  std::uint64_t bytes_ = 0;
  friend class WeightReader;
};

}  // namespace waste::vision

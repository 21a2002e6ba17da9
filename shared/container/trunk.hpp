// The trunk: every non-expert tensor, kept quantised (F32/Q8G/Q4G/Q3G, fp16 scale per group of
// 128) and dequantised inline by the kernels. The resident tensors are packed into one
// read-only "trunk image" (private memory in huge pages where THP allows, or a shared-memory segment the ioserver fills
// once for all its clients); quantised embed_tokens stays on disk and one row is pread per token,
// unless a client loads it into its own memory (compute/model/resident_tensor.hpp) when its
// budget allows (MemoryPlan::embed_bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "shared/container/manifest.hpp"
#include "shared/result.hpp"

namespace waste {

// Where each trunk tensor lives in the image. Deterministic from the manifest alone, so the
// daemon (which fills the image) and every client (which maps it) agree without talking.
struct TrunkLayout {
  static constexpr std::uint64_t kNotResident = ~std::uint64_t{0};
  static constexpr std::uint64_t kAlign = 64;   // each tensor starts on a cache line
  std::vector<std::uint64_t> image_offset;      // per manifest.trunk entry; kNotResident = on disk
  std::uint64_t image_bytes = 0;

  // Tensors outside tensor_prefix (vision tower) and quantised embed_tokens stay on disk.
  static TrunkLayout plan(const Manifest& manifest);
};

// Read the resident tensors of trunk.bin into `image` (size >= layout.image_bytes).
Status load_trunk_image(const std::filesystem::path& trunk_bin, const Manifest& manifest,
                        const TrunkLayout& layout, std::span<std::byte> image);

// A tensor as the kernels see it: payload rows then scales, both inside the image.
struct TrunkTensor {
  const TrunkTensorInfo* info = nullptr;
  const std::byte* payload = nullptr;        // nullptr when the tensor is on disk
  const std::uint16_t* scales = nullptr;     // rows x n_groups fp16 (unaligned-safe reads)
  [[nodiscard]] bool resident() const { return payload != nullptr; }
};

class Trunk {
 public:
  // `image` must stay valid while the Trunk lives; `keep_alive` owns it (vector, mapping...).
  static Result<Trunk> open(const std::filesystem::path& container_dir, const Manifest& manifest,
                            std::span<const std::byte> image, std::shared_ptr<const void> keep_alive);
  // Convenience: a private image loaded from trunk.bin.
  static Result<Trunk> load(const std::filesystem::path& container_dir, const Manifest& manifest);

  Trunk(Trunk&&) noexcept;
  Trunk& operator=(Trunk&&) noexcept;
  ~Trunk();

  // Name without the tensor prefix, e.g. "model.layers.3.self_attn.q_proj.weight".
  [[nodiscard]] const TrunkTensor* find(std::string_view name) const;
  // Dequantise one row to f32 (resident or on disk: the embedding path). `out` has cols() floats.
  Status read_row(const TrunkTensor& tensor, std::int64_t row, std::span<float> out) const;
  // The tensor's stored bytes, payload then scales (quantised), into `dst` of exactly
  // payload_bytes() + scale_bytes(): from the image, or read from trunk.bin when it is on disk
  // (what makes embed_tokens resident: compute/model/resident_tensor.hpp).
  Status read_tensor_bytes(const TrunkTensor& tensor, std::span<std::byte> dst) const;
  // Whole tensor to f32 (tests, oracle cross-checks). rows()*cols() floats.
  Result<std::vector<float>> dequantize(const TrunkTensor& tensor) const;
  [[nodiscard]] std::uint64_t resident_bytes() const;

 private:
  struct Impl;
  explicit Trunk(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Element (r, c) of a quantised row, the scalar reference the kernels are tested against.
float dequantize_element(const TrunkTensorInfo& info, const std::byte* payload,
                         const std::uint16_t* scales, std::int64_t row, std::int64_t col);

}  // namespace waste

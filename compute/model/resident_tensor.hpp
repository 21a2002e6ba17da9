// A trunk tensor that the trunk image leaves on disk (quantised embed_tokens: one pread per
// token otherwise), read once into this process's memory. It keeps the stored bytes (payload then
// fp16 scales), so Trunk::read_row dequantises a row from here exactly as it does from disk.
#pragma once

#include <cstdint>
#include <vector>

#include "shared/container/trunk.hpp"
#include "shared/result.hpp"

namespace waste::model {

class ResidentTensor {
 public:
  // Errors: Trunk::read_tensor_bytes's (naming trunk.bin and the tensor).
  static Result<ResidentTensor> load(const Trunk& trunk, const TrunkTensor& tensor);

  ResidentTensor(ResidentTensor&&) noexcept = default;
  ResidentTensor& operator=(ResidentTensor&&) noexcept = default;
  ResidentTensor(const ResidentTensor&) = delete;
  ResidentTensor& operator=(const ResidentTensor&) = delete;

  // Resident view (payload and scales in bytes()); valid while this object lives, moves included.
  [[nodiscard]] const TrunkTensor& tensor() const { return tensor_; }
  [[nodiscard]] std::uint64_t bytes() const { return storage_.size(); }

 private:
  ResidentTensor() = default;
  std::vector<std::byte> storage_;  // a move keeps the buffer, so tensor_'s pointers stay valid
  TrunkTensor tensor_;
};

}  // namespace waste::model

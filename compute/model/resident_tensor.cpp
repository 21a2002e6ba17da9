#include "compute/model/resident_tensor.hpp"

namespace waste::model {

Result<ResidentTensor> ResidentTensor::load(const Trunk& trunk, const TrunkTensor& tensor) {
  const TrunkTensorInfo& info = *tensor.info;
  ResidentTensor out;
  out.storage_.resize(info.payload_bytes() + info.scale_bytes());
  WASTE_TRY(trunk.read_tensor_bytes(tensor, out.storage_));
  out.tensor_.info = tensor.info;
  out.tensor_.payload = out.storage_.data();
  out.tensor_.scales = info.quantized() ? reinterpret_cast<const std::uint16_t*>(out.storage_.data() + info.payload_bytes())
                                        : nullptr;
  return out;
}

}  // namespace waste::model

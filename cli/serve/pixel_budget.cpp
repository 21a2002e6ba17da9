#include "cli/serve/pixel_budget.hpp"

#include "cli/serve/request_limits.hpp"

namespace waste::serve {

std::optional<PixelBudget::Lease> PixelBudget::try_lease(std::uint64_t pixels) {
  std::lock_guard lock(mutex_);
  if (pixels > capacity_ - used_) return std::nullopt;
  used_ += pixels;
  return std::optional<Lease>(std::in_place, *this, pixels);
}

std::uint64_t PixelBudget::in_use() const {
  std::lock_guard lock(mutex_);
  return used_;
}

void PixelBudget::release(std::uint64_t pixels) {
  std::lock_guard lock(mutex_);
  used_ -= pixels;
}

PixelBudget& decoding_pixels() {
  static PixelBudget budget(request_limits().max_decoding_pixels);
  return budget;
}

}  // namespace waste::serve

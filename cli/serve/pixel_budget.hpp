// The pixels being decoded at once across the server (image_url parts on the HTTP threads): a
// request leases its images' declared pixels before decoding any of them and returns them when
// its images are preprocessed. A lease that does not fit is refused at once (the caller answers
// 429, like a full queue): waiting would hold an HTTP thread and the request's body for as long
// as other requests decode, and the client's retry with backoff is the better queue.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

namespace waste::serve {

class PixelBudget {
 public:
  explicit PixelBudget(std::uint64_t capacity) : capacity_(capacity) {}

  class Lease {
   public:
    Lease(PixelBudget& budget, std::uint64_t pixels) : budget_(&budget), pixels_(pixels) {}
    Lease(Lease&& o) noexcept : budget_(o.budget_), pixels_(o.pixels_) { o.budget_ = nullptr; }
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() {
      if (budget_) budget_->release(pixels_);
    }

   private:
    PixelBudget* budget_;
    std::uint64_t pixels_;
  };

  // Null when `pixels` would take the pixels in use past the capacity.
  std::optional<Lease> try_lease(std::uint64_t pixels);
  [[nodiscard]] std::uint64_t in_use() const;
  [[nodiscard]] std::uint64_t capacity() const { return capacity_; }

 private:
  void release(std::uint64_t pixels);

  const std::uint64_t capacity_;
  mutable std::mutex mutex_;
  std::uint64_t used_ = 0;
};

// The server's budget, sized by request_limits().max_decoding_pixels at first use.
PixelBudget& decoding_pixels();

}  // namespace waste::serve

// key -> slot map of the expert cache: open addressing with linear probing, capacity a power of
// two >= 2 x slots, murmur3 finaliser hash, backward-shift deletion (no tombstones, no rebuild).
// Allocates only in the constructor, so lookups, inserts and erases on the hot path never do.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace waste {

class SlotIndex {
 public:
  explicit SlotIndex(std::uint32_t n_slots);
  [[nodiscard]] std::optional<std::uint32_t> find(std::uint32_t key) const noexcept;
  void insert(std::uint32_t key, std::uint32_t slot) noexcept;  // key must be absent
  void erase(std::uint32_t key) noexcept;                       // no-op when absent
  [[nodiscard]] std::uint32_t size() const noexcept { return size_; }

 private:
  static constexpr std::uint32_t kEmpty = 0xFFFFFFFFu;
  struct Entry {
    std::uint32_t key = kEmpty;
    std::uint32_t slot = 0;
  };
  [[nodiscard]] std::uint32_t home(std::uint32_t key) const noexcept;
  std::vector<Entry> table_;
  std::uint32_t mask_ = 0;
  std::uint32_t size_ = 0;
};

}  // namespace waste

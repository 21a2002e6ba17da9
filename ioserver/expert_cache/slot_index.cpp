#include "ioserver/expert_cache/slot_index.hpp"

#include "ioserver/expert_cache/key_hash.hpp"

namespace waste {

SlotIndex::SlotIndex(std::uint32_t n_slots) {
  std::uint32_t cap = 16;
  while (cap < 2 * n_slots) cap <<= 1;
  table_.resize(cap);
  mask_ = cap - 1;
}

std::uint32_t SlotIndex::home(std::uint32_t key) const noexcept {
  return key_bucket(key, mask_);
}

std::optional<std::uint32_t> SlotIndex::find(std::uint32_t key) const noexcept {
  for (std::uint32_t i = home(key);; i = (i + 1) & mask_) {
    if (table_[i].key == key) return table_[i].slot;
    if (table_[i].key == kEmpty) return std::nullopt;
  }
}

void SlotIndex::insert(std::uint32_t key, std::uint32_t slot) noexcept {
  std::uint32_t i = home(key);
  while (table_[i].key != kEmpty) i = (i + 1) & mask_;
  table_[i] = Entry{key, slot};
  ++size_;
}

void SlotIndex::erase(std::uint32_t key) noexcept {
  std::uint32_t i = home(key);
  while (table_[i].key != key) {
    if (table_[i].key == kEmpty) return;
    i = (i + 1) & mask_;
  }
  // Backward shift: pull later entries of the probe run into the hole when their home allows.
  std::uint32_t hole = i;
  for (std::uint32_t j = (hole + 1) & mask_; table_[j].key != kEmpty; j = (j + 1) & mask_) {
    const std::uint32_t h = home(table_[j].key);
    // Entry j may move to the hole iff its home is not in (hole, j] (cyclically).
    const bool home_between = hole <= j ? (h > hole && h <= j) : (h > hole || h <= j);
    if (!home_between) {
      table_[hole] = table_[j];
      hole = j;
    }
  }
  table_[hole] = Entry{};
  --size_;
}

}  // namespace waste

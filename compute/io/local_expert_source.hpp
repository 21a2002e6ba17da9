// LocalExpertSource: the in-process ExpertSource. Records are read synchronously with one
// aligned pread each (ExpertBanks::read_record) into 4 KiB-aligned buffers, and kept in a
// bounded LRU cache keyed by (layer, expert). Capacity is counted in records; 0 disables the
// cache (every demand request is a miss read into a private buffer). Records pinned by the
// current layer are never evicted; when every cache slot is pinned the record goes to a
// private buffer instead. Single-threaded, like every ExpertSource (see expert_source.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "compute/expert_source.hpp"
#include "shared/container/container.hpp"
#include "shared/container/expert_bank.hpp"

namespace waste {

struct LocalSourceOptions {
  bool direct_io = true;
  bool verify_records = false;
  std::size_t cache_records = 0;
};

class LocalExpertSource final : public ExpertSource {
 public:
  static Result<std::unique_ptr<LocalExpertSource>> open(const ContainerInfo& info, LocalSourceOptions options);

  Status request(int layer, std::span<const int> experts) override;
  Result<ExpertView> acquire(int layer, int expert) override;
  void release_layer(int layer) override;
  void prefetch(int layer, std::span<const int> experts) override {}  // no read-ahead in-process yet
  [[nodiscard]] ExpertSourceStats stats() const override { return stats_; }
  [[nodiscard]] bool direct_io() const override { return banks_.direct_io_engaged(); }

  [[nodiscard]] std::size_t capacity() const { return slots_.size(); }
  [[nodiscard]] std::size_t cached() const { return index_.size(); }

 private:
  struct Slot {
    AlignedBuffer buffer;
    std::uint64_t key = 0;
    std::uint64_t last_use = 0;
    int pins = 0;
    bool valid = false;
  };
  struct Held {
    int layer;
    int expert;
    const std::byte* data;
    int slot;           // cache slot, or -1 for a private buffer
    int private_index;
  };

  LocalExpertSource(ExpertBanks banks, ExpertGeometry geometry, const Manifest& manifest, std::size_t capacity);
  static std::uint64_t key_of(int layer, int expert) { return std::uint64_t(layer) << 32 | std::uint32_t(expert); }
  int pick_victim() const;
  Status read_into(int layer, int expert, std::span<std::byte> buffer);

  ExpertBanks banks_;
  ExpertGeometry geometry_;
  int n_layers_;
  int n_experts_;
  std::vector<bool> moe_layer_;
  std::vector<Slot> slots_;
  std::unordered_map<std::uint64_t, int> index_;
  std::vector<AlignedBuffer> private_;
  std::vector<bool> private_used_;
  std::vector<Held> held_;
  std::uint64_t clock_ = 0;
  ExpertSourceStats stats_;
};

}  // namespace waste

#include <vector>

#include "ioserver/nvme/record_reader.hpp"
#include "shared/container/expert_bank.hpp"
#include "shared/container/manifest.hpp"

namespace waste {

namespace {

class BankRecordReader final : public RecordReader {
 public:
  BankRecordReader(ExpertBanks banks, const Manifest& manifest) : banks_(std::move(banks)) {
    for (const auto& [layer, bank] : manifest.banks) {
      if (layer + 1 > n_layers_) n_layers_ = layer + 1;
      if (bank.experts > n_experts_) n_experts_ = bank.experts;
    }
    present_.assign(std::size_t(n_layers_), false);
    for (const auto& [layer, bank] : manifest.banks) present_[std::size_t(layer)] = true;
  }
  Status read(int layer, int expert, std::span<std::byte> buffer) const override {
    return banks_.read_record(layer, expert, buffer);
  }
  std::uint64_t record_bytes() const override { return banks_.record_bytes(); }
  bool direct_io_engaged() const override { return banks_.direct_io_engaged(); }
  int n_layers() const override { return n_layers_; }
  int n_experts() const override { return n_experts_; }
  bool has_layer(int layer) const override {
    return layer >= 0 && layer < n_layers_ && present_[std::size_t(layer)];
  }

 private:
  ExpertBanks banks_;
  int n_layers_ = 0;
  int n_experts_ = 0;
  std::vector<bool> present_;
};

}  // namespace

std::unique_ptr<RecordReader> make_bank_record_reader(ExpertBanks banks, const Manifest& manifest) {
  return std::make_unique<BankRecordReader>(std::move(banks), manifest);
}

}  // namespace waste

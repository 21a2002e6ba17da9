// A RecordReader whose reads go through io_uring: one ring per reader thread (thread_local, so
// no locking), one IORING_OP_READ per record into the caller's slot buffer, from the same bank
// descriptors ExpertBanks opened (O_DIRECT when its probe engaged it). Validation and errors are
// ExpertBanks::read_record's, word for word.
//
// Where io_uring is unavailable (old kernel, seccomp, RLIMIT_MEMLOCK), the reader falls back to
// ExpertBanks' pread path; io_uring_engaged() and fallback_reason() say so, and the daemon logs it.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ioserver/nvme/record_reader.hpp"
#include "shared/container/expert_bank.hpp"

namespace waste {

class UringRecordReader final : public RecordReader {
 public:
  // `banks` must come from ExpertBanks::open on `manifest`.
  UringRecordReader(ExpertBanks banks, const Manifest& manifest);

  Status read(int layer, int expert, std::span<std::byte> buffer) const override;
  [[nodiscard]] std::uint64_t record_bytes() const override { return banks_.record_bytes(); }
  [[nodiscard]] bool direct_io_engaged() const override { return banks_.direct_io_engaged(); }
  [[nodiscard]] bool io_uring_engaged() const override { return engaged_; }
  [[nodiscard]] int n_layers() const override { return n_layers_; }
  [[nodiscard]] int n_experts() const override { return n_experts_; }
  [[nodiscard]] bool has_layer(int layer) const override;

  // Why io_uring is not used ("io_uring_queue_init: Operation not permitted"); empty when engaged.
  [[nodiscard]] const std::string& fallback_reason() const { return fallback_reason_; }

 private:
  ExpertBanks banks_;
  int n_layers_ = 0;
  int n_experts_ = 0;
  std::vector<bool> present_;
  bool engaged_ = false;
  std::string fallback_reason_;
};

std::unique_ptr<UringRecordReader> make_uring_record_reader(ExpertBanks banks, const Manifest& manifest);

}  // namespace waste

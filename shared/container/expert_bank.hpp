// Reading expert records from the experts-L{n}.bin banks: one aligned pread per record,
// O_DIRECT when a probe read proves it works on this filesystem (else buffered reads with
// POSIX_FADV_RANDOM). Used by the in-process expert source and by waste-ioserver's readers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>

#include "shared/container/expert_record.hpp"
#include "shared/container/manifest.hpp"
#include "shared/result.hpp"

namespace waste {

struct BankReadOptions {
  bool direct_io = true;    // try O_DIRECT (probed); false = buffered + POSIX_FADV_RANDOM
  bool verify_crc = false;  // check each record's crc32 (the header is always checked)
};

class ExpertBanks {
 public:
  static Result<ExpertBanks> open(const std::filesystem::path& container_dir, const Manifest& manifest,
                                  int n_codebooks, BankReadOptions options);
  ExpertBanks(ExpertBanks&&) noexcept;
  ExpertBanks& operator=(ExpertBanks&&) noexcept;
  ~ExpertBanks();

  // Read and validate one record into `buffer` (record_bytes long, 4096-aligned when direct
  // I/O is engaged). Thread-safe (pread). Errors: "expert E of layer L: reason".
  Status read_record(int layer, int expert, std::span<std::byte> buffer) const;

  // read_record in two halves, for readers that issue the read themselves (io_uring):
  // locate_record checks the key and buffer and says where the record lies and which descriptor
  // to read it from (the O_DIRECT one when engaged and `buffer` is 4096-aligned);
  // check_record validates the header (and the CRC when verify_crc) of the bytes read.
  // Errors are read_record's, word for word.
  struct RecordSource {
    int fd = -1;
    std::uint64_t offset = 0;
    std::span<std::byte> record;  // the first record_bytes of `buffer`
  };
  Result<RecordSource> locate_record(int layer, int expert, std::span<std::byte> buffer) const;
  Status check_record(int layer, int expert, std::span<const std::byte> record) const;

  [[nodiscard]] bool direct_io_engaged() const;       // every bank opened with O_DIRECT
  [[nodiscard]] const ExpertGeometry& geometry() const;
  [[nodiscard]] std::uint64_t record_bytes() const;   // same for every bank in v0 containers

 private:
  struct Impl;
  explicit ExpertBanks(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// An aligned heap buffer for direct I/O (RAII; 4096 alignment, length rounded up to 4096).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t bytes);
  [[nodiscard]] std::span<std::byte> span() { return {data_.get(), size_}; }
  [[nodiscard]] std::span<const std::byte> span() const { return {data_.get(), size_}; }
  [[nodiscard]] std::byte* data() { return data_.get(); }
  [[nodiscard]] std::size_t size() const { return size_; }

 private:
  struct Free { void operator()(std::byte* p) const noexcept; };
  std::unique_ptr<std::byte, Free> data_;
  std::size_t size_ = 0;
};

}  // namespace waste

// Where the ioserver's reader threads get record bytes from. The daemon uses BankRecordReader
// (the container's experts-L{n}.bin banks through ExpertBanks: one aligned pread per record,
// header always validated, CRC when asked); tests may inject their own reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "shared/result.hpp"

namespace waste {

class ExpertBanks;
struct Manifest;

class RecordReader {
 public:
  virtual ~RecordReader() = default;
  // Read (and validate) record (layer, expert) into `buffer`: record_bytes() long, 4 KiB aligned.
  // Called concurrently from every reader thread. Errors name the record.
  virtual Status read(int layer, int expert, std::span<std::byte> buffer) const = 0;
  [[nodiscard]] virtual std::uint64_t record_bytes() const = 0;
  [[nodiscard]] virtual bool direct_io_engaged() const = 0;
  // True only for a reader whose reads go through io_uring (make_uring_record_reader, when the
  // kernel allowed it).
  [[nodiscard]] virtual bool io_uring_engaged() const { return false; }
  // Keys are valid when layer < n_layers(), has_layer(layer) and expert < n_experts().
  [[nodiscard]] virtual int n_layers() const = 0;
  [[nodiscard]] virtual int n_experts() const = 0;
  [[nodiscard]] virtual bool has_layer(int layer) const = 0;
};

// The container's banks. `banks` must come from ExpertBanks::open on `manifest`.
std::unique_ptr<RecordReader> make_bank_record_reader(ExpertBanks banks, const Manifest& manifest);

}  // namespace waste

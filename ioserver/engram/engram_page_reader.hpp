// EngramPageReader: the container's Engram tables (engram-L{n}.bin, shared/container/
// engram_table.hpp) as the daemon reads them: every table in the directory opened at creation,
// its header parsed and CRC-checked, the file's size checked against the header, O_DIRECT when
// the filesystem allows it (one aligned 4 KiB read decides). A read is one page (4 KiB) into an
// Engram pool slot. It is a RecordReader so the daemon's ReaderPool can run its reads: "layer"
// is the table index, "expert" the page id (as 32 bits).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ioserver/nvme/record_reader.hpp"
#include "shared/container/engram_table.hpp"
#include "shared/result.hpp"

namespace waste {

struct EngramTableFile {
  std::string name;  // engram-L{n}.bin: the errors' origin
  EngramTableHeader header;
  std::uint64_t pages = 0;  // data pages
  bool direct = false;      // read with O_DIRECT
};

class EngramPageReader final : public RecordReader {
 public:
  // Every engram-L{n}.bin in `dir`, ordered by n (table index i is the i-th). None: an empty
  // reader. Errors: a header that does not parse (the parser's text, naming the file), a file
  // of another size than its header says, rows wider than one 4 KiB page (the daemon's pool
  // slots are single pages), more than 256 tables.
  static Result<std::unique_ptr<EngramPageReader>> open(const std::filesystem::path& dir, bool direct);
  ~EngramPageReader() override;

  [[nodiscard]] const std::vector<EngramTableFile>& tables() const noexcept { return tables_; }

  // Page `page` (taken as 32 bits) of table `table` into buffer (4 KiB, 4 KiB aligned).
  Status read(int table, int page, std::span<std::byte> buffer) const override;
  [[nodiscard]] std::uint64_t record_bytes() const override { return kEngramPage; }
  [[nodiscard]] bool direct_io_engaged() const override;
  [[nodiscard]] int n_layers() const override { return int(tables_.size()); }
  [[nodiscard]] int n_experts() const override { return 0; }
  [[nodiscard]] bool has_layer(int table) const override { return table >= 0 && table < int(tables_.size()); }

 private:
  EngramPageReader() = default;
  std::vector<EngramTableFile> tables_;
  std::vector<int> fds_;  // owned: closed in the destructor
};

}  // namespace waste

// The converter's engram-L{n}.bin writer and reader (engram_table.hpp).
#include "compute/convert/engram_table.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <string>

#include "shared/crc32.hpp"

namespace waste::convert {

// ---- writer

Result<EngramTableWriter> EngramTableWriter::open(const std::filesystem::path& path, const EngramTableHeader& header,
                                                  std::uint64_t rows_done, std::uint32_t crc_done) {
  WASTE_TRY(check_engram_header(header));
  EngramTableWriter w;
  w.path_ = path;
  w.header_ = header;
  const std::uint32_t rpp = header.rows_per_page();
  if (rows_done > header.rows || (rows_done % rpp != 0 && rows_done != header.rows)) {
    return make_error(Errc::argument, path.string() + ": cannot resume at row " + std::to_string(rows_done) +
                                          " (not a page boundary of " + std::to_string(rpp) + " rows)");
  }
  auto fd = open_file(path, O_RDWR | O_CREAT);
  if (!fd) return std::unexpected(fd.error());
  w.fd_ = std::move(*fd);
  const std::uint64_t keep = kEngramPage + (rows_done + rpp - 1) / rpp * header.page_bytes();
  if (::ftruncate(w.fd_.get(), off_t(keep)) != 0) {
    return make_error(Errc::io, path.string() + ": ftruncate: " + std::strerror(errno));
  }
  if (rows_done == 0) {
    // A placeholder header (CRC 0) until finish(): an unfinished file never parses as finished.
    std::array<std::byte, kEngramPage> zero{};
    if (::pwrite(w.fd_.get(), zero.data(), zero.size(), 0) != ssize_t(zero.size())) {
      return make_error(Errc::io, path.string() + ": write: " + std::strerror(errno));
    }
  }
  if (::lseek(w.fd_.get(), off_t(keep), SEEK_SET) < 0)
    return make_error(Errc::io, path.string() + ": lseek: " + std::strerror(errno));
  w.rows_ = rows_done;
  w.crc_ = crc_done;
  w.page_.assign(header.page_bytes(), std::byte{0});
  return w;
}

Status EngramTableWriter::flush_page() {
  WASTE_TRY(write_all(fd_.get(), page_, path_));
  crc_ = crc32_update(crc_, page_);
  std::fill(page_.begin(), page_.end(), std::byte{0});
  in_page_ = 0;
  return ok();
}

Status EngramTableWriter::append(std::span<const float> row) {
  if (rows_ >= header_.rows)
    return make_error(Errc::argument, path_.string() + ": more rows than the header's " + std::to_string(header_.rows));
  if (row.size() != std::size_t(header_.width)) {
    return make_error(Errc::argument, path_.string() + ": a row of " + std::to_string(row.size()) +
                                          " columns, width is " + std::to_string(header_.width));
  }
  const std::uint32_t rb = header_.row_bytes();
  auto s = quantize_engram_row(header_.bits, row, std::span(page_).subspan(std::size_t(in_page_) * rb, rb));
  if (!s) return std::unexpected(s.error().with_context(path_.string() + " row " + std::to_string(rows_)));
  ++rows_;
  if (++in_page_ == header_.rows_per_page()) WASTE_TRY(flush_page());
  return ok();
}

Status EngramTableWriter::sync() {
  if (::fsync(fd_.get()) != 0) return make_error(Errc::io, path_.string() + ": fsync: " + std::strerror(errno));
  return ok();
}

Status EngramTableWriter::finish() {
  if (rows_ != header_.rows) {
    return make_error(Errc::argument, path_.string() + ": " + std::to_string(rows_) + " of " +
                                          std::to_string(header_.rows) + " rows written");
  }
  if (in_page_ > 0) WASTE_TRY(flush_page());
  header_.data_crc = crc_;
  const auto head = encode_engram_header(header_);
  if (::pwrite(fd_.get(), head.data(), head.size(), 0) != ssize_t(head.size())) {
    return make_error(Errc::io, path_.string() + ": write: " + std::strerror(errno));
  }
  return sync();
}

// ---- reader

Result<EngramTableReader> EngramTableReader::open(const std::filesystem::path& path) {
  EngramTableReader r;
  r.path_ = path;
  auto fd = open_file(path, O_RDONLY);
  if (!fd) return std::unexpected(fd.error());
  r.fd_ = std::move(*fd);
  std::array<std::byte, kEngramPage> head{};
  auto n = pread_full(r.fd_.get(), head, 0);
  if (!n) return std::unexpected(n.error());
  auto h = parse_engram_header(std::span(head.data(), *n), path.string());
  if (!h) return std::unexpected(h.error());
  r.header_ = *h;
  auto size = file_size(r.fd_.get(), path);
  if (!size) return std::unexpected(size.error());
  if (*size != h->file_bytes()) {
    return make_error(Errc::format, path.string() + ": size " + std::to_string(*size) +
                                        " != " + std::to_string(h->file_bytes()) + " from its header");
  }
  return r;
}

Status EngramTableReader::read_row(std::uint64_t row, std::span<float> out) const {
  if (row >= header_.rows || out.size() != std::size_t(header_.width)) {
    return make_error(Errc::argument,
                      path_.string() + ": row " + std::to_string(row) + " of " + std::to_string(header_.rows));
  }
  std::vector<std::byte> b(header_.row_bytes());
  auto n = pread_full(fd_.get(), b, header_.row_offset(row));
  if (!n) return std::unexpected(n.error());
  if (*n != b.size()) return make_error(Errc::format, path_.string() + ": truncated at row " + std::to_string(row));
  dequantize_engram_row(header_.bits, b, out);
  return ok();
}

Result<std::uint32_t> EngramTableReader::data_crc() const {
  std::uint32_t crc = 0;
  std::vector<std::byte> buf(1 << 20);
  for (std::uint64_t off = 0; off < header_.data_bytes();) {
    const std::size_t want = std::size_t(std::min<std::uint64_t>(buf.size(), header_.data_bytes() - off));
    auto n = pread_full(fd_.get(), std::span(buf.data(), want), kEngramPage + off);
    if (!n) return std::unexpected(n.error());
    if (*n != want) return make_error(Errc::format, path_.string() + ": truncated data");
    crc = crc32_update(crc, std::span(buf.data(), want));
    off += want;
  }
  return crc;
}

}  // namespace waste::convert

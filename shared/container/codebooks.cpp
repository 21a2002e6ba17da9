#include "shared/container/codebooks.hpp"

#include <fcntl.h>

#include <cstring>

#include "shared/container/file_io.hpp"
#include "shared/fp16.hpp"

namespace waste {

Result<Codebooks> Codebooks::load(const std::filesystem::path& codebooks_bin, const ExpertQuant& quant) {
  // A hand-built ExpertQuant may bypass Manifest::parse: re-check what the padding relies on.
  if (quant.index_bits != 8 && quant.index_bits != 6) {
    return make_error(Errc::format, codebooks_bin.string() + ": expert_quant.index_bits " +
                                        std::to_string(quant.index_bits) + " is not 8 or 6");
  }
  if (quant.entries < 1 || quant.entries > quant.table_entries()) {
    return make_error(Errc::format, codebooks_bin.string() + ": expert_quant.entries " + std::to_string(quant.entries) +
                                        " is out of range 1.." + std::to_string(quant.table_entries()) + " (" +
                                        std::to_string(quant.index_bits) + "-bit indices)");
  }
  if (quant.vec_dim < 1 || quant.vec_dim > 64) {
    return make_error(Errc::format, codebooks_bin.string() + ": expert_quant.vec_dim " + std::to_string(quant.vec_dim) +
                                        " is out of range 1..64");
  }
  auto fd = open_file(codebooks_bin, O_RDONLY);
  if (!fd) return std::unexpected(fd.error());
  auto size = file_size(fd->get(), codebooks_bin);
  if (!size) return std::unexpected(size.error());
  const std::uint64_t rec = record_bytes(quant);
  // Positional records: a trailing partial record is ignored, as the v0 reader does.
  const std::uint64_t n_books = *size / rec;
  if (n_books > 65535 + 3 * 8) {
    return make_error(Errc::format, codebooks_bin.string() + ": " + std::to_string(n_books) + " books is more than any codebook_id can address");
  }
  Codebooks books;
  books.n_books_ = static_cast<int>(n_books);
  books.entries_ = quant.entries;
  books.table_entries_ = quant.table_entries();
  books.vec_dim_ = quant.vec_dim;
  const std::size_t on_disk = std::size_t(quant.entries) * quant.vec_dim;
  const std::size_t per_book = std::size_t(books.table_entries_) * quant.vec_dim;
  books.centroids_.assign(n_books * per_book, 0.0f);  // entries past `entries` stay zero
  std::vector<std::byte> raw(rec);
  for (std::uint64_t b = 0; b < n_books; ++b) {
    auto n = pread_full(fd->get(), raw, b * rec);
    if (!n) return std::unexpected(n.error().with_context(codebooks_bin.string()));
    if (*n != rec) return make_error(Errc::io, codebooks_bin.string() + ": short read of book " + std::to_string(b));
    for (std::size_t i = 0; i < on_disk; ++i) {
      std::uint16_t h;
      std::memcpy(&h, raw.data() + 16 + 2 * i, 2);
      books.centroids_[b * per_book + i] = fp16_to_f32_flush(h);
    }
  }
  return books;
}

std::span<const float> Codebooks::book(int b) const {
  const std::size_t per_book = std::size_t(table_entries_) * vec_dim_;
  return std::span<const float>(centroids_).subspan(std::size_t(b) * per_book, per_book);
}

}  // namespace waste

// codebooks.bin: fixed-size positional records (16-byte WCBK header, then entries x vec_dim
// fp16 centroids). Books are addressed by position only, as the v0 reference does; the header
// is informational. Decoded once to f32 with the subnormal-flushing fp16 decode, each book
// padded with zero centroids to table_entries() (2^index_bits) so that any index value a record
// can hold addresses memory inside the book and the LUT built from it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "shared/container/manifest.hpp"
#include "shared/result.hpp"

namespace waste {

inline constexpr std::uint32_t kCodebookMagic = 0x4B424357;  // "WCBK"

class Codebooks {
 public:
  static Result<Codebooks> load(const std::filesystem::path& codebooks_bin, const ExpertQuant& quant);

  [[nodiscard]] int n_books() const { return n_books_; }
  [[nodiscard]] int entries() const { return entries_; }              // centroids stored per book
  [[nodiscard]] int table_entries() const { return table_entries_; }  // entries in memory, zero-padded
  [[nodiscard]] int vec_dim() const { return vec_dim_; }
  // Book b: table_entries x vec_dim floats, centroid c at [c*vec_dim, (c+1)*vec_dim); centroids
  // c >= entries() are zero.
  [[nodiscard]] std::span<const float> book(int b) const;
  // Book id of (layer base, kind 0 gate / 1 up / 2 down, stage).
  [[nodiscard]] static int book_id(int base, int kind, int stage, int stages) {
    return base + kind * stages + stage;
  }
  [[nodiscard]] static std::uint64_t record_bytes(const ExpertQuant& quant) {
    return 16 + std::uint64_t(quant.entries) * quant.vec_dim * 2;
  }

 private:
  int n_books_ = 0, entries_ = 0, table_entries_ = 0, vec_dim_ = 0;
  std::vector<float> centroids_;
};

}  // namespace waste

// Synthetic Engram files (engram_synth.hpp).
#include "compute/engram/engram_synth.hpp"

#include <algorithm>
#include <string>

#include "compute/convert/engram_table.hpp"
#include "compute/engram/engram_json.hpp"
#include "compute/engram/engram_layout.hpp"
#include "shared/container/engram_table.hpp"
#include "shared/container/file_io.hpp"

namespace waste::engram {
namespace {

std::uint64_t mix64(std::uint64_t z) noexcept {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t max_rows_of(const EngramLayout& l) {
  std::uint64_t m = 0;
  for (const auto& layer : l.layers) m = std::max(m, layer.rows());
  return m;
}

}  // namespace

float synthetic_engram_value(std::uint64_t seed, int layer, std::uint64_t row, int col) noexcept {
  std::uint64_t h = mix64(seed ^ 0x656e6772616d0000ULL);  // "engram"
  h = mix64(h ^ std::uint64_t(std::uint32_t(layer)));
  h = mix64(h ^ row);
  h = mix64(h ^ std::uint64_t(std::uint32_t(col)));
  return float(double(h >> 40) / double(1ULL << 24) * 2.0 - 1.0);  // 24 bits: exact in f32
}

Result<SynthEngramResult> write_synthetic_engram(const ModelConfig& c, const std::filesystem::path& dir,
                                                 const SynthEngramRequest& request) {
  if (!c.uses_engram()) return make_error(Errc::argument, "synthetic engram: the config has no engram_layer_ids");
  if (c.engram_compressed_vocab_size < 1) {
    return make_error(Errc::argument, "synthetic engram: engram_compressed_vocab_size " +
                                          std::to_string(c.engram_compressed_vocab_size) + " is below 1");
  }
  if (request.bits != 4 && request.bits != 8) {
    return make_error(Errc::argument, "synthetic engram: bits " + std::to_string(request.bits) + " is not 4 or 8");
  }
  const std::int64_t cvs = c.engram_compressed_vocab_size;
  EngramParams p;
  p.layer_ids = c.engram_layer_ids;
  p.max_ngram_size = c.engram_max_ngram_size;
  p.n_heads = c.engram_n_heads;
  p.head_dim = c.engram_head_dim;
  p.compressed_vocab_size = cvs;
  p.pad_id = std::int64_t(c.engram_pad_id) % cvs;
  p.engram_vocab_size = std::uint64_t(std::max<std::int64_t>(c.engram_vocab_size, 1));
  if (request.max_rows == 0) {
    for (auto n : c.engram_num_embeddings) p.num_embeddings.push_back(std::uint64_t(n));
  }
  auto layout = derive_engram_layout(p);
  if (!layout) return std::unexpected(layout.error().with_context("synthetic engram"));
  if (request.max_rows != 0 && max_rows_of(*layout) > request.max_rows) {
    // Consecutive primes from the start up: a table's rows are about columns x start, so scale
    // the start down until the largest table fits.
    const std::uint64_t columns = std::uint64_t(std::max(layout->columns(), 1));
    std::uint64_t start = std::max<std::uint64_t>(1, std::min(p.engram_vocab_size, request.max_rows / columns));
    for (int tries = 0;; ++tries) {
      p.engram_vocab_size = start;
      layout = derive_engram_layout(p);
      if (!layout) return std::unexpected(layout.error().with_context("synthetic engram"));
      const std::uint64_t m = max_rows_of(*layout);
      if (m <= request.max_rows) break;
      if (start == 1 || tries > 400) {
        return make_error(Errc::argument, "synthetic engram: " + std::to_string(request.max_rows) +
                                              " rows per table is below the smallest tables this layout allows (" +
                                              std::to_string(m) + " rows)");
      }
      const auto scaled = std::uint64_t(double(start) * double(request.max_rows) / double(m));
      start = std::max<std::uint64_t>(1, std::min(start - 1, scaled));
    }
  }

  SynthEngramResult out;
  out.engram_vocab_size = p.engram_vocab_size;
  out.tables.layout = std::move(*layout);
  out.tables.token_map.resize(std::size_t(std::max(c.vocab, 0)));
  for (std::size_t i = 0; i < out.tables.token_map.size(); ++i) {
    out.tables.token_map[i] = std::int32_t(std::int64_t(i) % cvs);
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(Errc::io, dir.string() + ": " + ec.message());
  WASTE_TRY(write_file_atomic(dir / kEngramJsonFile, engram_json_text(out.tables.layout)));
  WASTE_TRY(write_file_atomic(dir / kTokenMapFile, token_map_bytes(out.tables.token_map)));

  const int width = out.tables.layout.head_dim;
  std::vector<float> row(std::size_t(std::max(width, 0)));
  for (const EngramLayer& layer : out.tables.layout.layers) {
    EngramTableHeader h;
    h.bits = request.bits;
    h.rows = layer.rows();
    h.width = width;
    h.layer = layer.layer;
    const std::filesystem::path path = dir / engram_table_file_name(layer.layer);
    auto w = convert::EngramTableWriter::open(path, h, 0, 0);
    if (!w) return std::unexpected(w.error());
    for (std::uint64_t r = 0; r < h.rows; ++r) {
      for (int col = 0; col < width; ++col) {
        row[std::size_t(col)] = synthetic_engram_value(request.seed, layer.layer, r, col);
      }
      WASTE_TRY(w->append(row));
    }
    WASTE_TRY(w->finish());
    out.table_bytes += h.file_bytes();
  }
  return out;
}

}  // namespace waste::engram

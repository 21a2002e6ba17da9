#include "shared/container/expert_record.hpp"

#include <cstdio>
#include <cstring>

#include "shared/crc32.hpp"

namespace waste {
namespace {

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

std::unexpected<Error> record_error(int layer, int expert, const std::string& reason) {
  return make_error(Errc::io, "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) + ": " + reason);
}

ExpertRecordHeader read_header(std::span<const std::byte> record) {
  ExpertRecordHeader h;
  std::memcpy(&h, record.data(), sizeof h);
  return h;
}

std::uint64_t scale_span_bytes(const ExpertGeometry& g) {
  return 2 * (std::uint64_t(g.rows[0]) + g.rows[1] + g.rows[2]);
}

}  // namespace

Result<ExpertGeometry> ExpertGeometry::from(const ModelConfig& config, const ExpertQuant& quant) {
  ExpertGeometry g;
  g.stages = quant.stages;
  g.vec_dim = quant.vec_dim;
  g.entries = quant.entries;
  g.lut_entries = quant.table_entries();
  g.packed6 = quant.packed6();
  const int lat = config.expert_input_dim();
  g.rows[0] = g.rows[1] = config.moe_inter;
  g.cols[0] = g.cols[1] = lat;
  g.rows[2] = lat;
  g.cols[2] = config.moe_inter;
  std::uint64_t off = sizeof(ExpertRecordHeader);
  for (int k = 0; k < 3; ++k) {
    if (g.rows[k] < 1 || g.cols[k] < 1 || g.cols[k] % g.vec_dim != 0) {
      return make_error(Errc::format, "expert matrix " + std::to_string(g.rows[k]) + "x" + std::to_string(g.cols[k]) +
                                          ": columns are not a positive multiple of vec_dim " + std::to_string(g.vec_dim));
    }
    const std::uint64_t blocks = (std::uint64_t(g.rows[k]) + kIndexBlockRows - 1) / kIndexBlockRows;
    g.index_bytes[k] = blocks * std::uint64_t(g.cols[k] / g.vec_dim) * kIndexBlockRows * std::uint64_t(g.bytes_per_run());
    off += g.index_bytes[k];
  }
  g.payload_end = off + scale_span_bytes(g);
  g.record_bytes = (g.payload_end + kRecordAlign - 1) / kRecordAlign * kRecordAlign;
  if (g.record_bytes > 0xFFFFF000ull) {
    return make_error(Errc::format, "expert record of " + std::to_string(g.record_bytes) +
                                        " bytes does not fit the 32-bit header offsets");
  }
  return g;
}

std::uint64_t ExpertGeometry::offset_of(MatrixKind kind) const {
  std::uint64_t off = sizeof(ExpertRecordHeader);
  for (int k = 0; k < static_cast<int>(kind); ++k) off += index_bytes[k];
  return off;
}

std::uint64_t ExpertGeometry::scales_offset(MatrixKind kind) const {
  std::uint64_t off = sizeof(ExpertRecordHeader) + index_bytes[0] + index_bytes[1] + index_bytes[2];
  for (int k = 0; k < static_cast<int>(kind); ++k) off += 2 * std::uint64_t(rows[k]);
  return off;
}

Status validate_record_header(std::span<const std::byte> record, int layer, int expert, const ExpertQuant& quant,
                              const ExpertGeometry& geometry, int n_codebooks) {
  const std::uint64_t rec = record.size();
  if (rec < sizeof(ExpertRecordHeader)) {
    return record_error(layer, expert, "record of " + std::to_string(rec) + " bytes is shorter than its 48-byte header");
  }
  const ExpertRecordHeader h = read_header(record);
  if (h.magic != kExpertMagic) return record_error(layer, expert, "bad magic " + hex32(h.magic));
  if (h.layer != layer) {
    return record_error(layer, expert, "layer field " + std::to_string(h.layer) + " != " + std::to_string(layer));
  }
  if (h.expert_id != expert) {
    return record_error(layer, expert, "expert id field " + std::to_string(h.expert_id) + " != " + std::to_string(expert));
  }
  if (std::uint64_t(h.rec_4k_blocks) * kRecordAlign != rec) {
    return record_error(layer, expert, "rec_4k_blocks " + std::to_string(h.rec_4k_blocks) + " * 4096 != record size " +
                                           std::to_string(rec));
  }
  if (!quant.record_fmt_ok(h.fmt)) {
    return record_error(layer, expert, "fmt " + std::to_string(h.fmt) + " does not match the manifest's " + quant.fmt +
                                           " (expected " + (quant.packed6() ? "8" : "4 or 5") + ")");
  }
  if (h.lowrank_id != 0) return record_error(layer, expert, "lowrank_id " + std::to_string(h.lowrank_id) + " != 0");
  if (int(h.codebook_id) + 3 * quant.stages > n_codebooks) {
    return record_error(layer, expert, "codebook " + std::to_string(h.codebook_id) + " + " +
                                           std::to_string(3 * quant.stages) + " books exceeds the " +
                                           std::to_string(n_codebooks) + " in codebooks.bin");
  }
  // The reference checks ordering only; we also require each matrix's index data to fit
  // before the next offset, so kernels that trust the geometry never read past a record.
  const std::uint64_t gate = h.gate_off, up = h.up_off, down = h.down_off, scales = h.chan_corr_off;
  const bool ordered = gate == sizeof(ExpertRecordHeader) && gate < up && up < down && down < scales && scales <= rec;
  const bool fits = gate + geometry.index_bytes[0] <= up && up + geometry.index_bytes[1] <= down &&
                    down + geometry.index_bytes[2] <= scales;
  if (!ordered || !fits) {
    return record_error(layer, expert, "offsets not ordered (gate " + std::to_string(gate) + ", up " + std::to_string(up) +
                                           ", down " + std::to_string(down) + ", scales " + std::to_string(scales) +
                                           ", record " + std::to_string(rec) + ")");
  }
  if (scale_span_bytes(geometry) > rec - scales) {
    return record_error(layer, expert, "scales overrun the record (" + std::to_string(scales) + " + " +
                                           std::to_string(scale_span_bytes(geometry)) + " > " + std::to_string(rec) + ")");
  }
  return {};
}

std::uint32_t compute_record_crc(std::span<const std::byte> record, const ExpertGeometry& geometry) {
  const ExpertRecordHeader h = read_header(record);
  std::uint64_t end = std::uint64_t(h.chan_corr_off) + scale_span_bytes(geometry);
  if (end > record.size()) end = record.size();  // only after a failed header check
  if (end < sizeof(ExpertRecordHeader)) return crc32({});
  return crc32(record.subspan(sizeof(ExpertRecordHeader), end - sizeof(ExpertRecordHeader)));
}

Status verify_record_crc(std::span<const std::byte> record, int layer, int expert, const ExpertGeometry& geometry) {
  if (record.size() < sizeof(ExpertRecordHeader)) return record_error(layer, expert, "record shorter than its header");
  const std::uint32_t stored = read_header(record).crc32;
  const std::uint32_t computed = compute_record_crc(record, geometry);
  if (stored != computed) {
    return record_error(layer, expert, "crc32 mismatch (stored " + hex32(stored) + ", computed " + hex32(computed) + ")");
  }
  return {};
}

void finish_record(std::span<std::byte> record, const ExpertGeometry& geometry, int layer, int expert, int codebook_id) {
  ExpertRecordHeader h{};
  h.magic = kExpertMagic;
  h.layer = static_cast<std::uint16_t>(layer);
  h.expert_id = static_cast<std::uint16_t>(expert);
  h.fmt = geometry.packed6 ? 8 : 4;
  h.codebook_id = static_cast<std::uint16_t>(codebook_id);
  h.rec_4k_blocks = static_cast<std::uint32_t>(geometry.record_bytes / kRecordAlign);
  h.gate_off = static_cast<std::uint32_t>(geometry.offset_of(MatrixKind::gate));
  h.up_off = static_cast<std::uint32_t>(geometry.offset_of(MatrixKind::up));
  h.down_off = static_cast<std::uint32_t>(geometry.offset_of(MatrixKind::down));
  h.chan_corr_off = static_cast<std::uint32_t>(geometry.scales_offset(MatrixKind::gate));
  std::memcpy(record.data(), &h, sizeof h);
  // Padding after the payload must be zero (the CRC skips it, readers may not).
  std::memset(record.data() + geometry.payload_end, 0, record.size() - geometry.payload_end);
  h.crc32 = compute_record_crc(record, geometry);
  std::memcpy(record.data(), &h, sizeof h);
}

ExpertView make_expert_view(std::span<const std::byte> record, const ExpertGeometry& geometry) {
  const ExpertRecordHeader h = read_header(record);
  ExpertView v;
  v.layer = h.layer;
  v.expert = h.expert_id;
  v.codebook_id = h.codebook_id;
  const auto* base = reinterpret_cast<const std::uint8_t*>(record.data());
  v.index[0] = base + h.gate_off;
  v.index[1] = base + h.up_off;
  v.index[2] = base + h.down_off;
  std::uint64_t s = h.chan_corr_off;
  for (int k = 0; k < 3; ++k) {
    v.scales[k] = reinterpret_cast<const std::uint16_t*>(base + s);
    s += 2 * std::uint64_t(geometry.rows[k]);
  }
  return v;
}

}  // namespace waste

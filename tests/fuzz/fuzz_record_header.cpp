// libFuzzer: an expert record (48-byte header + payload) of the tiny model's geometry ->
// validate_record_header, then for an accepted one the CRC and the in-place view, whose
// pointers must stay inside the record. The input is copied to an exact-size heap buffer so
// ASan sees any read past it.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "shared/container/expert_record.hpp"
#include "shared/container/model_config.hpp"

namespace {

struct Tiny {
  waste::ModelConfig config;
  waste::ExpertQuant quant;
  waste::ExpertGeometry geometry;
  Tiny() {
    config.hidden = 128;
    config.moe_inter = 64;
    config.n_experts = 8;
    auto g = waste::ExpertGeometry::from(config, quant);
    if (!g) __builtin_trap();
    geometry = *g;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Tiny tiny;
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  std::vector<std::byte> record(bytes, bytes + size);
  const std::span<const std::byte> rec(record);
  auto ok = waste::validate_record_header(rec, 2, 5, tiny.quant, tiny.geometry, 27);
  if (!ok) return 0;
  (void)waste::verify_record_crc(rec, 2, 5, tiny.geometry);
  const waste::ExpertView view = waste::make_expert_view(rec, tiny.geometry);
  const auto* end = reinterpret_cast<const std::uint8_t*>(record.data() + record.size());
  for (int kind = 0; kind < 3; ++kind) {
    if (view.index[kind] + tiny.geometry.index_bytes[kind] > end) __builtin_trap();
    if (reinterpret_cast<const std::uint8_t*>(view.scales[kind]) + 2 * tiny.geometry.rows[kind] > end) __builtin_trap();
  }
  return 0;
}

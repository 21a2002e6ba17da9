// libFuzzer: manifest.json text -> Manifest::parse (JSON, config bounds, quant, banks, trunk
// index). An accepted manifest is exercised the way the engine and the planner use it: record
// geometry, trunk layout, the memory plan, and the JSON round trip.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "shared/container/expert_record.hpp"
#include "shared/container/manifest.hpp"
#include "shared/container/trunk.hpp"
#include "shared/memory/memory_plan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = waste::Manifest::parse(text);
  if (!m) {
    if (m.error().message.empty()) __builtin_trap();  // every refusal says why
    return 0;
  }
  for (const auto& t : m->trunk) {
    (void)t.payload_bytes();
    (void)t.scale_bytes();
    (void)t.row_stride_bytes();
  }
  if (m->config.n_experts > 0) (void)waste::ExpertGeometry::from(m->config, m->quant);
  (void)waste::TrunkLayout::plan(*m);
  (void)m->max_record_bytes();
  (void)waste::plan_memory(text, 64);
  // What we write we must read back.
  auto again = waste::Manifest::parse(m->to_json_text());
  if (!again) __builtin_trap();
  return 0;
}

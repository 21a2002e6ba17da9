#include "shared/memory/memory_plan.hpp"

#include <string>

#include "shared/container/container.hpp"
#include "shared/container/manifest.hpp"
#include "shared/container/trunk.hpp"
#include "shared/memory/client_sizing.hpp"

namespace waste {

static_assert(kPrefillChunkTokens == sizing::kPrefillChunk && kMaxPrefillChunkTokens == sizing::kMaxPrefillChunk);

namespace {

Status check_prefill_chunk(int prefill_chunk) {
  if (prefill_chunk >= 1 && prefill_chunk <= kMaxPrefillChunkTokens) return ok();
  return make_error(Errc::argument, "prefill_chunk " + std::to_string(prefill_chunk) + " must be 1.." +
                                        std::to_string(kMaxPrefillChunkTokens));
}

}  // namespace

Result<MemoryPlan> plan_memory(std::string_view manifest_json, std::uint32_t ctx_tokens, int prefill_chunk) {
  auto parsed = Manifest::parse(manifest_json);
  if (!parsed) return std::unexpected(parsed.error());
  return plan_memory(*parsed, ctx_tokens, prefill_chunk);
}

Result<MemoryPlan> plan_memory(const Manifest& m, std::uint32_t ctx_tokens, int prefill_chunk) {
  WASTE_TRY(check_prefill_chunk(prefill_chunk));
  const ModelConfig& c = m.config;
  MemoryPlan plan;

  const TrunkLayout layout = TrunkLayout::plan(m);
  plan.trunk_bytes = layout.image_bytes;
  for (std::size_t i = 0; i < m.trunk.size(); ++i) {
    const auto& t = m.trunk[i];
    if (!m.tensor_prefix.empty() && !t.name.starts_with(m.tensor_prefix)) {
      plan.vision_bytes += t.bytes;
    } else if (layout.image_offset[i] == TrunkLayout::kNotResident) {
      plan.embed_bytes += t.payload_bytes() + t.scale_bytes();
    }
  }

  ExpertGeometry geometry;
  if (c.n_experts > 0) {
    auto g = ExpertGeometry::from(c, m.quant);
    if (!g) return std::unexpected(g.error());
    geometry = *g;
  }
  const sizing::ClientSizes sizes = sizing::client_sizes(c, geometry, ctx_tokens, prefill_chunk);
  plan.state_bytes = sizes.state_bytes();
  plan.scratch_bytes = sizes.scratch_bytes();

  if (!m.banks.empty()) plan.record_bytes = m.banks.begin()->second.record_bytes();
  plan.max_record_bytes = m.max_record_bytes();
  for (const auto& [layer, bank] : m.banks) plan.expert_records += std::uint64_t(bank.experts);
  plan.top_k = c.top_k;
  plan.n_layers = c.n_layers;
  const std::uint64_t top_k = std::uint64_t(c.top_k), layers = std::uint64_t(c.n_layers);
  plan.min_expert_cache_bytes = plan.record_bytes * top_k * 2;
  plan.floor_bytes = plan.trunk_bytes + plan.state_bytes + plan.scratch_bytes + plan.min_expert_cache_bytes;
  plan.working_set_bytes = plan.record_bytes * top_k * layers;
  plan.recommended_bytes = plan.floor_bytes + 3 * plan.working_set_bytes;
  return plan;
}

Result<MemoryPlan> plan_memory(const std::filesystem::path& container, std::uint32_t ctx_tokens, int prefill_chunk) {
  WASTE_TRY(check_prefill_chunk(prefill_chunk));  // an argument error names no file
  auto text = read_manifest_text(container);  // says so when `container` is not one
  if (!text) return std::unexpected(text.error());
  auto plan = plan_memory(std::string_view(*text), ctx_tokens, prefill_chunk);
  if (!plan) return std::unexpected(plan.error().with_context((container / "manifest.json").string()));
  return plan;
}

}  // namespace waste

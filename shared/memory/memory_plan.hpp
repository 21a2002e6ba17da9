// The memory plan of a container, from its manifest alone (waste-v0-reference.md §4.1): what
// must be resident (trunk, session state, scratch, a minimal expert cache) and what a useful
// expert cache costs. Computed from the validated Manifest (Manifest::parse: a manifest the
// engine would refuse gets no plan), the trunk image size from TrunkLayout, and state/scratch
// from shared/memory/client_sizing, the function the engine's allocators use. Differences from
// the reference planner's figures are listed in docs/design/daemon.md ("Memory plan").
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

#include "shared/result.hpp"

namespace waste {

struct Manifest;

inline constexpr std::uint32_t kDefaultCtxTokens = 4096;
inline constexpr int kPrefillChunkTokens = 64;      // default chunked-prefill width (the scratch is sized for it)
inline constexpr int kMaxPrefillChunkTokens = 512;  // widest chunk a plan (and an engine) takes

struct MemoryPlan {
  std::uint64_t trunk_bytes = 0;      // the trunk image (TrunkLayout): tensors under the prefix, minus quantised embed_tokens
  std::uint64_t embed_bytes = 0;      // quantised embed_tokens, on disk (one row read per token) unless
                                      // a client loads it (embedding_resident in budget.hpp); not in the floor
  std::uint64_t vision_bytes = 0;     // tensors outside the prefix (vision weights only; not in the floor)
  std::uint64_t state_bytes = 0;      // RunState: KDA state + conv rings + MLA latent cache for ctx_tokens + AttnRes + hidden
  std::uint64_t scratch_bytes = 0;    // Forward's decode, LUT and chunked-prefill buffers + the logits
  std::uint64_t record_bytes = 0;     // bytes/experts of the lowest-layer bank (every bank has one geometry)
  std::uint64_t max_record_bytes = 0; // largest record over all banks (sizes arena slots)
  std::uint64_t expert_records = 0;   // records over all banks: the whole expert set
  int top_k = 0;                      // config num_experts_per_token
  int n_layers = 0;
  std::uint64_t min_expert_cache_bytes = 0;  // 2 * top_k * record: one layer's experts, double-buffered
  std::uint64_t floor_bytes = 0;             // trunk + state + scratch + min_expert_cache
  std::uint64_t working_set_bytes = 0;       // record * top_k * n_layers: one token's experts
  std::uint64_t recommended_bytes = 0;       // floor + 3 * working set

  // What one compute client holds outside the daemon: its own state and scratch.
  [[nodiscard]] std::uint64_t client_bytes() const { return state_bytes + scratch_bytes; }
};

// Plan from a parsed manifest (a container's description: ContainerInfo::manifest), for a client
// whose prefill passes carry up to `prefill_chunk` tokens (EngineOptions::prefill_chunk; the
// chunk buffers hold max(prefill_chunk, 64) tokens). Errors: ExpertGeometry::from's; a chunk
// outside 1..kMaxPrefillChunkTokens (Errc::argument, "prefill_chunk N must be 1..512").
Result<MemoryPlan> plan_memory(const Manifest& manifest, std::uint32_t ctx_tokens = kDefaultCtxTokens,
                               int prefill_chunk = kPrefillChunkTokens);
// Plan from manifest.json text. Errors: Manifest::parse's (Errc::format, naming the key).
Result<MemoryPlan> plan_memory(std::string_view manifest_json, std::uint32_t ctx_tokens = kDefaultCtxTokens,
                               int prefill_chunk = kPrefillChunkTokens);
// Plan for a container directory (reads DIR/manifest.json). Errors name the path.
Result<MemoryPlan> plan_memory(const std::filesystem::path& container,
                               std::uint32_t ctx_tokens = kDefaultCtxTokens, int prefill_chunk = kPrefillChunkTokens);

}  // namespace waste

// What a model family puts into the shared forward pass (forward.cpp), decided once when the
// Forward is built: for every layer which attention block and which mixer run, and how the
// residual stream joins them. The layer loop dispatches on this plan and holds no family
// flags. One file per family (families/<name>.cpp) says how its config maps to blocks;
// family.cpp picks the family by ModelConfig::arch.
//
// A new family adds its block kinds here (an attention kind, a mixer kind, a residual kind),
// the block itself in its own file next to kda.cpp / mla.cpp / moe.cpp, one case in the
// layer loop's switch, and its family file (compute/forward/README.md, "Adding a family").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compute/forward/csa2_state.hpp"
#include "shared/container/model_config.hpp"

namespace waste::forward {

// csa2: DeepSeek-V4.1's CSA2 (csa2.hpp), the layer's role in LayerPlan::csa2.
enum class AttentionKind : std::uint8_t { kda, mla, csa2 };
enum class MixerKind : std::uint8_t { dense_ffn, moe };
// add: x += block output. attn_res: K3's Attention Residuals (attn_res.hpp, residual.hpp).
// mhc: GLM's manifold-constrained hyper-connections, hc_mult streams mixed by a Sinkhorn-
// normalised matrix around every sublayer (mhc.hpp, residual.hpp).
// mhc_single_pass: DeepSeek-V4.1's mHC on the same coefficients, a site's pre collapsing the
// streams for the next site (mhc_single_pass_site), the head reading the last FFN site's pre.
enum class ResidualKind : std::uint8_t { add, attn_res, mhc, mhc_single_pass };

// One layer's blocks, in order: attention, then the mixer.
struct LayerPlan {
  AttentionKind attention = AttentionKind::mla;
  MixerKind mixer = MixerKind::dense_ffn;
  // An MLA layer whose positions GLM's k-pool DSA indexer selects (kpool_indexer.hpp).
  bool indexed = false;
  // DeepSeek-V4.1: the layer's CSA2 role (attention csa2) and the KV-source layer whose
  // compressed cache it reads (-1 at ratio 0); an Engram layer (engram_layer_ids).
  Csa2Role csa2{};
  int kv_source = -1;
  bool engram = false;
  bool operator==(const LayerPlan&) const = default;
};

struct ModelPlan {
  std::string family;              // "kimi-linear", "kimi-k3", "deepseek-v3", "glm5-next", "deepseek-v4.1", or "v0"
  ResidualKind residual = ResidualKind::add;
  std::vector<LayerPlan> layers;   // one per layer, config.n_layers
};

// The plan of the family that claims `c` (by arch), else the v0 container's rules (v0_plan).
ModelPlan plan_model(const ModelConfig& c);

// The v0 container's rules, which every family of v0 follows (waste-v0-reference.md §1.3):
// KDA at linear_attn_config.kda_layers and MLA at the others, a dense FFN below
// first_k_dense_replace and MoE from there on, Attention Residuals when the config gives
// attn_res_block_size. `family` names the plan.
ModelPlan v0_plan(const ModelConfig& c, std::string family);

// The families (families/<name>.cpp): whether a config is theirs, and their plan.
bool claims_kimi_linear(const ModelConfig& c);
ModelPlan plan_kimi_linear(const ModelConfig& c);
bool claims_kimi_k3(const ModelConfig& c);
ModelPlan plan_kimi_k3(const ModelConfig& c);
bool claims_deepseek_v3(const ModelConfig& c);
ModelPlan plan_deepseek_v3(const ModelConfig& c);
bool claims_glm5_next(const ModelConfig& c);
ModelPlan plan_glm5_next(const ModelConfig& c);
bool claims_deepseek_v41(const ModelConfig& c);
ModelPlan plan_deepseek_v41(const ModelConfig& c);

}  // namespace waste::forward

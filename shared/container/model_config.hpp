// ModelConfig: the subset of the HF config.json the forward pass needs, parsed and bounded
// exactly as the v0 reference engine does (waste-v0-reference.md §1.3). Untrusted input:
// every dimension is range-checked before anything is sized from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/container/rope_config.hpp"
#include "shared/result.hpp"

namespace waste {

// Expert ids travel as 16 bits: the record header's expert_id, the daemon's cache key and the
// ring requests. A config with more experts is refused at parse time rather than truncated.
inline constexpr int kMaxExperts = 1 << 16;
// n_group bound: the router keeps one score per group on the stack.
inline constexpr int kMaxExpertGroups = 64;

// csa: DeepSeek-V4.1's attention (one shared 512-wide K=V latent, sliding window, CSA2
// compressed branch per compress_ratios); every layer of a deepseek-v4.1 config.
enum class LayerAttention : std::uint8_t { kda, mla, csa };
enum class LayerFfn : std::uint8_t { dense, moe };
// sqrtsoftplus: sqrt(softplus(x)) (DeepSeek-V4.1).
enum class RouterScoring : std::uint8_t { sigmoid, softmax, sqrtsoftplus };


struct ModelConfig {
  std::string arch;            // "kimi-linear", "kimi-k3", "glm5-next", "deepseek-v4.1", or the raw architectures[0]
  int n_layers = 0;            // num_hidden_layers, 1..128
  int hidden = 0;              // hidden_size
  int vocab = 0;               // vocab_size
  int eos_token_id = 0;        // 0 = keep the tokenizer's default; a list's first id (the primary eos)
  std::vector<int> eos_token_ids;  // every id of eos_token_id (an int or a list, GLM: 3); empty when absent
  int bos_token_id = -1;       // informational; -1 when absent
  float rms_eps = 1e-5f;       // rms_norm_eps, in (0, 1)

  // MoE
  int n_experts = 0;           // num_experts (0 = dense model), <= kMaxExperts
  int top_k = 0;               // num_experts_per_token
  int moe_inter = 0;           // moe_intermediate_size
  int dense_inter = 0;         // intermediate_size (dense layers)
  int n_shared = 0;            // num_shared_experts; shared width = moe_inter * max(n_shared, 1)
  int first_dense = 0;         // first_k_dense_replace: layers < first_dense are dense
  float routed_scale = 1.0f;   // routed_scaling_factor
  bool renormalize = false;    // moe_renormalize
  RouterScoring scoring = RouterScoring::sigmoid;  // scoring_func / moe_router_activation_func
  int n_group = 1;             // n_group / num_expert_group: contiguous expert groups
  int topk_group = 1;          // topk_group: groups kept before the top-k
  int n_mtp = 0;               // num_nextn_predict_layers: MTP layers, never run (not in the container)
  int latent_dim = 0;          // routed_expert_hidden_size (K3 latent MoE); 0 = none
  bool latent_norm = false;    // latent_moe_use_norm
  bool act_situ = false;       // hidden_act == "situ"
  float situ_beta = 1.0f;      // activation_situ_beta
  float situ_linear_beta = 0.0f;  // activation_situ_linear_beta (0 = up not squashed)

  // MLA
  int n_heads = 0;             // num_attention_heads
  int kv_lora = 0;             // kv_lora_rank
  int q_lora = 0;              // q_lora_rank (0 = direct q_proj)
  int qk_nope = 0;             // qk_nope_head_dim
  int qk_rope = 0;             // qk_rope_head_dim
  int v_head = 0;              // v_head_dim
  bool mla_output_gate = false;  // mla_use_output_gate (K3)
  RopeConfig rope;

  // KDA (linear_attn_config)
  int kda_heads = 0;           // num_heads
  int kda_dim = 0;             // head_dim
  int conv_k = 4;              // short_conv_kernel_size
  bool full_rank_gate = false; // use_full_rank_gate (K3: g_proj instead of g_a/g_b)
  float gate_lower_bound = 0.0f;  // < 0 selects the bounded sigmoid gate (K3)

  int attn_res_block = 0;      // attn_res_block_size (K3 Attention Residuals); 0 = none

  // GLM-5.3-Flash (glm5_next): manifold-constrained hyper-connections (mHC), the clamped
  // SwiGLU and the k-pool DSA indexer's shape. All absent = off.
  int hc_mult = 0;             // hc_mult: residual streams, 1..16; 0 = one plain stream (no mHC)
  int hc_sinkhorn_iters = 20;  // hc_sinkhorn_iters, 1..1000
  float hc_eps = 1e-6f;        // hc_eps, in [0, 1)
  float swiglu_limit = 0.0f;   // swiglu_limit: gate <= limit, |up| <= limit before SiLU*up; 0 = none
  int index_topk = 0;          // index_topk: positions the DSA indexer keeps
  int index_kpool = 0;         // index_kpool: tokens per pooled key
  int index_n_heads = 0;       // index_n_heads (0 = no indexer)
  int index_head_dim = 0;      // index_head_dim
  bool index_kpool_always_select_tail = false;  // index_kpool_always_select_tail

  // DeepSeek-V4.1-Flash (deepseek_v41): CSA2 attention, single-pass mHC, Engram tables. The
  // public engine's manifest keys, under the HF names (model-families.md §2.1, §2.3). All empty
  // or 0 for every other family.
  int head_dim = 0;            // head_dim: query head width = the shared K=V latent width (512)
  int o_groups = 0;            // o_groups: head groups of the grouped low-rank output projection
  int o_lora_rank = 0;         // o_lora_rank: per-group width of wo_a
  int sliding_window = 0;      // sliding_window: raw KV ring per layer
  std::vector<int> compress_ratios;        // per backbone layer: 0 window only, 1 projection, r > 1 pooling
  std::vector<int> kv_source_layer_ids;    // layers owning a compressor (sorted)
  std::vector<int> index_source_layer_ids; // layers running the indexer (sorted)
  int candidate_source_layer_id = -1;      // two-level top-k source (-1 = off); absent = last kv source
  int candidate_topk_blocks = 0;           // candidate_topk_blocks
  int candidate_block_size = 0;            // candidate_block_size (compressed positions per block)
  double compress_rope_theta = 0.0;        // compress_rope_theta: rope base of compressed layers (+ YaRN)
  float gate_temp = 1.0f;                  // gate_temp: router logits divided by it
  bool attn_sink = false;                  // attn_sink: per-head sink in every softmax (required by V4.1)
  bool hc_single_pass = false;             // hc_single_pass: a sublayer's mix yields the next one's pre
  std::vector<int> engram_layer_ids;               // layers with an Engram table (sorted)
  std::vector<std::int64_t> engram_num_embeddings; // rows per Engram layer
  std::int64_t engram_vocab_size = 0;              // engram_vocab_size: where the prime draw starts
  int engram_max_ngram_size = 0;                   // engram_max_ngram_size (N-grams 2..N)
  int engram_n_heads = 0;                          // engram_n_heads: hash heads per n-gram size
  int engram_head_dim = 0;                         // engram_head_dim: row width
  int engram_pad_id = 0;                           // engram_pad_id
  int engram_compressed_vocab_size = 0;            // engram_compressed_vocab_size

  // Per layer: from layer_types when the config gives it ("linear_attention" = KDA,
  // "full_attention" / "deepseek_sparse_attention" = MLA; GLM), else from
  // linear_attn_config.kda_layers (1-based in JSON, the v0 rule).
  std::vector<LayerAttention> attention;

  [[nodiscard]] bool is_kda(int layer) const { return attention[layer] == LayerAttention::kda; }
  [[nodiscard]] bool is_csa(int layer) const { return attention[layer] == LayerAttention::csa; }
  [[nodiscard]] bool is_deepseek_v41() const { return arch == "deepseek-v4.1"; }
  [[nodiscard]] int n_csa_layers() const;
  [[nodiscard]] bool uses_engram() const { return !engram_layer_ids.empty(); }
  // The kv source whose compressed cache layer `layer` reads (the last source at or before it),
  // or -1 (window-only layer, or none).
  [[nodiscard]] int kv_source_of(int layer) const;
  [[nodiscard]] bool is_moe(int layer) const { return n_experts > 0 && layer >= first_dense; }
  [[nodiscard]] int expert_input_dim() const { return latent_dim > 0 ? latent_dim : hidden; }
  [[nodiscard]] int shared_inter() const { return moe_inter * (n_shared > 1 ? n_shared : 1); }
  [[nodiscard]] int kda_channels() const { return kda_heads * kda_dim; }
  [[nodiscard]] int n_kda_layers() const;
  [[nodiscard]] int n_mla_layers() const;
  [[nodiscard]] int n_moe_layers() const;
  [[nodiscard]] bool grouped_routing() const { return n_group > 1 && topk_group < n_group; }
  [[nodiscard]] bool uses_mhc() const { return hc_mult > 0; }
  // Floats of one token's residual stream: hc_mult streams of hidden under mHC, else hidden.
  [[nodiscard]] int stream_width() const { return hidden * (hc_mult > 0 ? hc_mult : 1); }
  // Rows of an mHC projection: pre (hc), post (hc), comb (hc x hc).
  [[nodiscard]] int hc_mix() const { return (2 + hc_mult) * hc_mult; }
  [[nodiscard]] bool has_indexer() const { return index_n_heads > 0; }

  // Parse from the manifest's "config" (or its nested "text_config"). Errors name the key:
  // "config.hidden_size: 0 is out of range 1..1048576".
  static Result<ModelConfig> from_json(const nlohmann::json& config);
  // Write back the keys from_json reads, as HF names (used by `waste synth`).
  [[nodiscard]] nlohmann::json to_json() const;
};

}  // namespace waste

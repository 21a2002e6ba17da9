// DeepSeek-V4.1's trunk tensor list (v41_tensors.hpp).
#include "shared/container/v41_tensors.hpp"

#include <algorithm>

namespace waste {
namespace {

bool has(const std::vector<int>& ids, int l) { return std::find(ids.begin(), ids.end(), l) != ids.end(); }

}  // namespace

std::vector<V41Tensor> v41_trunk_tensors(const ModelConfig& c) {
  std::vector<V41Tensor> e;
  using I = std::int64_t;
  const I hid = c.hidden, hc = std::max(1, c.hc_mult), nh = c.n_heads, hd = c.head_dim;
  const I og = c.o_groups, ol = c.o_lora_rank, id = c.index_head_dim, ih = c.index_n_heads;
  e.push_back({"model.embed_tokens.weight", {c.vocab, hid}});
  e.push_back({"model.norm.weight", {hid}});
  e.push_back({"lm_head.weight", {c.vocab, hid}});
  if (c.uses_mhc()) {
    e.push_back({"model.hc_head_fn", {hc, hc * hid}});
    e.push_back({"model.hc_head_base", {hc}});
    e.push_back({"model.hc_head_scale", {1}});
  }
  const bool any_index = !c.index_source_layer_ids.empty();
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.";
    e.push_back({p + "input_layernorm.weight", {hid}});
    e.push_back({p + "post_attention_layernorm.weight", {hid}});
    e.push_back({a + "wq_a.weight", {c.q_lora, hid}});
    e.push_back({a + "q_norm.weight", {c.q_lora}});
    e.push_back({a + "wq_b.weight", {nh * hd, c.q_lora}});
    e.push_back({a + "wkv.weight", {hd, hid}});
    e.push_back({a + "kv_norm.weight", {hd}});
    e.push_back({a + "wo_a.weight", {og * ol, og > 0 ? nh * hd / og : 0}});
    e.push_back({a + "wo_b.weight", {hid, og * ol}});
    e.push_back({a + "attn_sink", {nh}});
    if (has(c.kv_source_layer_ids, l)) {
      e.push_back({a + "compressor.wkv.weight", {hd, hid}});
      e.push_back({a + "compressor.norm.weight", {hd}});
      const int ratio = std::size_t(l) < c.compress_ratios.size() ? c.compress_ratios[std::size_t(l)] : 0;
      if (ratio > 1) e.push_back({a + "compressor.wgate.weight", {hd, hid}});
      if (any_index) {
        e.push_back({a + "indexer.wk.weight", {id, hd}});
        e.push_back({a + "indexer.k_norm.weight", {id}});
      }
    }
    if (has(c.index_source_layer_ids, l)) {
      e.push_back({a + "indexer.wq_b.weight", {ih * id, c.q_lora}});
      e.push_back({a + "indexer.weights_proj.weight", {ih, hid}});
    }
    if (c.uses_mhc()) {
      for (const char* site : {"hc_attn_", "hc_ffn_"}) {
        e.push_back({p + site + "fn", {c.hc_mix(), hc * hid}});
        e.push_back({p + site + "base", {c.hc_mix()}});
        e.push_back({p + site + "scale", {3}});
      }
    }
    if (c.is_moe(l)) {
      const std::string m = p + "block_sparse_moe.";
      e.push_back({m + "gate.weight", {c.n_experts, hid}});
      e.push_back({m + "gate.e_score_correction_bias", {c.n_experts}});
      e.push_back({m + "gate.bias_vl", {c.n_experts}, false});
      if (c.n_shared > 0) {
        const I s = c.shared_inter();
        e.push_back({m + "shared_experts.gate_proj.weight", {s, hid}});
        e.push_back({m + "shared_experts.up_proj.weight", {s, hid}});
        e.push_back({m + "shared_experts.down_proj.weight", {hid, s}});
      }
    }
    if (has(c.engram_layer_ids, l)) {
      const I in = I(c.engram_max_ngram_size - 1) * c.engram_n_heads * c.engram_head_dim;
      e.push_back({p + "engram.wkv.weight", {hid * (hc + 1), in}});
      e.push_back({p + "engram.q_weight", {hc, hid}});
      e.push_back({p + "engram.k_weight", {hc, hid}});
    }
  }
  return e;
}

}  // namespace waste

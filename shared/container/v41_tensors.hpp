// DeepSeek-V4.1-Flash's trunk tensors as a container names them (the converter's rename of the
// release's names: compute/convert/v41_config.hpp), with the shape the config fixes for each.
// The one list that the converter checks a checkpoint against, `waste synth` writes, and
// model::ModelWeights::bind checks before it binds; the forward pass's shapes are those of
// compute/forward/csa2.hpp (Csa2Weights), mhc.hpp (MhcWeights) and router.hpp.
//
// Per layer L (p = "model.layers.L.", a = p + "self_attn."; nh heads of hd = head_dim):
//   p input_layernorm.weight / post_attention_layernorm.weight   [hid]
//   a wq_a.weight [q_lora, hid], q_norm.weight [q_lora], wq_b.weight [nh*hd, q_lora],
//     wkv.weight [hd, hid], kv_norm.weight [hd], wo_a.weight [o_groups*o_lora, nh*hd/o_groups],
//     wo_b.weight [hid, o_groups*o_lora], attn_sink [nh]
//   KV sources: a compressor.wkv.weight [hd, hid], compressor.norm.weight [hd],
//     compressor.wgate.weight [hd, hid] (ratio > 1), and with any index source
//     a indexer.wk.weight [index_head_dim, hd], indexer.k_norm.weight [index_head_dim]
//   index sources: a indexer.wq_b.weight [ih*id, q_lora], indexer.weights_proj.weight [ih, hid]
//   p hc_attn_ / hc_ffn_ fn [hc_mix, hc*hid], base [hc_mix], scale [3]
//   p block_sparse_moe.gate.weight [E, hid], gate.e_score_correction_bias [E],
//     gate.bias_vl [E] (optional: the image-span bias, bound when present),
//     shared_experts.{gate,up}_proj.weight [S, hid], down_proj.weight [hid, S]
//   engram layers: p engram.wkv.weight [hid*(hc+1), (max_ngram-1)*engram_n_heads*engram_head_dim],
//     engram.q_weight [hc, hid], engram.k_weight [hc, hid]
// Model: model.embed_tokens.weight [vocab, hid], model.norm.weight [hid], lm_head.weight
// [vocab, hid], model.hc_head_fn [hc, hc*hid], model.hc_head_base [hc], model.hc_head_scale [1]
// (the release's head mix: kept by the converter, written by synth; the engine's head collapses
// the streams with the last FFN site's pre and does not read them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shared/container/model_config.hpp"

namespace waste {

struct V41Tensor {
  std::string name;                  // container name (no prefix)
  std::vector<std::int64_t> shape;   // fixed by the config
  bool required = true;              // false: bound when present (gate.bias_vl)
};

// Every trunk tensor of a deepseek-v4.1 config, in layer order (model tensors first).
std::vector<V41Tensor> v41_trunk_tensors(const ModelConfig& c);

}  // namespace waste

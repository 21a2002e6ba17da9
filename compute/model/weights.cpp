#include "compute/model/weights.hpp"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "shared/container/v41_tensors.hpp"

namespace waste::model {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// Resolves names under one layer prefix ("model.layers.3.") and checks shapes.
class Binder {
 public:
  explicit Binder(const Trunk& trunk) : trunk_(trunk) {}

  Result<const TrunkTensor*> find(const std::string& name) const {
    const TrunkTensor* t = trunk_.find(name);
    if (t == nullptr || t->info == nullptr) return make_error(Errc::format, "tensor " + name + ": missing");
    return t;
  }
  [[nodiscard]] bool has(const std::string& name) const { return trunk_.find(name) != nullptr; }

  // A matrix must be 2-D with exactly [rows, cols] and resident (any storage format).
  Result<QuantMatrix> matrix(const std::string& name, std::int64_t rows, std::int64_t cols) const {
    auto found = find(name);
    if (!found) return std::unexpected(found.error());
    const TrunkTensor& t = **found;
    const TrunkTensorInfo& info = *t.info;
    if (info.shape.size() != 2 || info.shape[0] != rows || info.shape[1] != cols) {
      return make_error(Errc::format, "tensor " + name + ": expected shape " +
                                          shape_text({rows, cols}) + ", found " + shape_text(info.shape));
    }
    if (!t.resident()) return make_error(Errc::format, "tensor " + name + ": not resident in the trunk image");
    const auto fmt = static_cast<std::uint8_t>(info.fmt);
    if (fmt != 0 && fmt != 2 && fmt != 3 && fmt != 7) {
      return make_error(Errc::format, "tensor " + name + ": storage format " +
                                          tensor_format_name(info.fmt) + " is not a trunk matrix format");
    }
    QuantMatrix m{};
    m.payload = reinterpret_cast<const std::uint8_t*>(t.payload);
    m.scales = info.quantized() ? t.scales : nullptr;
    m.rows = rows;
    m.cols = cols;
    m.row_stride = info.quantized() ? info.row_stride_bytes() : cols * std::int64_t(sizeof(float));
    m.group = info.group;
    m.fmt = fmt;
    return m;
  }

  // An F32 vector; `exact` demands exactly n elements, otherwise at least n (conv taps, A_log,
  // dt_bias: the reference only requires enough floats). The first n are copied.
  Result<std::vector<float>> vector(const std::string& name, std::int64_t n, bool exact = true) const {
    auto found = find(name);
    if (!found) return std::unexpected(found.error());
    const TrunkTensor& t = **found;
    const TrunkTensorInfo& info = *t.info;
    const std::int64_t have = info.elements();
    if (exact ? have != n : have < n) {
      return make_error(Errc::format, "tensor " + name + ": expected " + (exact ? "" : "at least ") +
                                          std::to_string(n) + " elements, found shape " + shape_text(info.shape));
    }
    if (info.fmt != TensorFormat::f32) {
      return make_error(Errc::format, "tensor " + name + ": expected F32 storage, found " +
                                          tensor_format_name(info.fmt));
    }
    if (!t.resident()) return make_error(Errc::format, "tensor " + name + ": not resident in the trunk image");
    std::vector<float> out(static_cast<std::size_t>(n));
    std::memcpy(out.data(), t.payload, out.size() * sizeof(float));
    return out;
  }

 private:
  const Trunk& trunk_;
};

#define BIND(dst, expr)                                       \
  do {                                                        \
    auto bound_ = (expr);                                     \
    if (!bound_) return std::unexpected(bound_.error());      \
    (dst) = std::move(*bound_);                               \
  } while (0)

Status bind_kda(const Binder& b, const ModelConfig& c, const std::string& p, KdaWeights& w) {
  const std::int64_t H = c.kda_heads, D = c.kda_dim, C = c.kda_channels(), K = c.conv_k, hid = c.hidden;
  BIND(w.q_proj, b.matrix(p + "q_proj.weight", C, hid));
  BIND(w.k_proj, b.matrix(p + "k_proj.weight", C, hid));
  BIND(w.v_proj, b.matrix(p + "v_proj.weight", C, hid));
  BIND(w.q_conv, b.vector(p + "q_conv1d.weight", C * K, false));
  BIND(w.k_conv, b.vector(p + "k_conv1d.weight", C * K, false));
  BIND(w.v_conv, b.vector(p + "v_conv1d.weight", C * K, false));
  BIND(w.f_a, b.matrix(p + "f_a_proj.weight", D, hid));
  BIND(w.f_b, b.matrix(p + "f_b_proj.weight", C, D));
  BIND(w.b_proj, b.matrix(p + "b_proj.weight", H, hid));
  BIND(w.a_log, b.vector(p + "A_log", H, false));
  BIND(w.dt_bias, b.vector(p + "dt_bias", C, false));
  if (c.full_rank_gate) {
    BIND(w.g_proj, b.matrix(p + "g_proj.weight", C, hid));
  } else {
    BIND(w.g_a, b.matrix(p + "g_a_proj.weight", D, hid));
    BIND(w.g_b, b.matrix(p + "g_b_proj.weight", C, D));
  }
  BIND(w.o_norm, b.vector(p + "o_norm.weight", D));
  BIND(w.o_proj, b.matrix(p + "o_proj.weight", hid, C));
  return ok();
}

Status bind_mla(const Binder& b, const ModelConfig& c, const std::string& p, MlaWeights& w) {
  const std::int64_t nh = c.n_heads, qd = c.qk_nope + c.qk_rope, hid = c.hidden;
  if (c.q_lora > 0) {
    BIND(w.q_a, b.matrix(p + "q_a_proj.weight", c.q_lora, hid));
    BIND(w.q_a_norm, b.vector(p + "q_a_layernorm.weight", c.q_lora));
    BIND(w.q_b, b.matrix(p + "q_b_proj.weight", nh * qd, c.q_lora));
  } else {
    BIND(w.q_proj, b.matrix(p + "q_proj.weight", nh * qd, hid));
  }
  BIND(w.kv_a, b.matrix(p + "kv_a_proj_with_mqa.weight", c.kv_lora + c.qk_rope, hid));
  BIND(w.kv_a_norm, b.vector(p + "kv_a_layernorm.weight", c.kv_lora));
  BIND(w.kv_b, b.matrix(p + "kv_b_proj.weight", nh * (c.qk_nope + c.v_head), c.kv_lora));
  if (c.mla_output_gate) BIND(w.g_proj, b.matrix(p + "g_proj.weight", nh * c.v_head, hid));
  BIND(w.o_proj, b.matrix(p + "o_proj.weight", hid, nh * c.v_head));
  if (c.has_indexer()) {
    const std::string ix = p + "indexer.";
    const std::int64_t ih = c.index_n_heads, id = c.index_head_dim;
    IndexerWeights& x = w.indexer;
    BIND(x.wq_b, b.matrix(ix + "wq_b.weight", ih * id, c.q_lora));
    BIND(x.wk, b.matrix(ix + "wk.weight", id, hid));
    BIND(x.k_norm_w, b.vector(ix + "k_norm.weight", id));
    BIND(x.k_norm_b, b.vector(ix + "k_norm.bias", id));
    BIND(x.weights_proj, b.matrix(ix + "weights_proj.weight", ih, hid));
    BIND(x.compress_gate, b.matrix(ix + "index_kpool_compress_gate", id, hid));
    BIND(x.compress_ape, b.vector(ix + "index_kpool_compress_ape", std::int64_t(c.index_kpool) * id));
  }
  return ok();
}

Status bind_ffn(const Binder& b, const std::string& p, const char* gate, const char* up, const char* down,
                std::int64_t inter, std::int64_t in, FfnWeights& w) {
  BIND(w.gate, b.matrix(p + gate, inter, in));
  BIND(w.up, b.matrix(p + up, inter, in));
  BIND(w.down, b.matrix(p + down, in, inter));
  return ok();
}

Status bind_moe(const Binder& b, const ModelConfig& c, const std::string& p, MoeWeights& w) {
  const std::int64_t hid = c.hidden;
  BIND(w.router, b.matrix(p + "gate.weight", c.n_experts, hid));
  // The correction bias is optional in v0: absent, or not F32, means no bias.
  const std::string bias_name = p + "gate.e_score_correction_bias";
  if (b.has(bias_name) && (*b.find(bias_name))->info->fmt == TensorFormat::f32) {
    BIND(w.score_bias, b.vector(bias_name, c.n_experts));
  }
  if (const std::string vl = p + "gate.bias_vl"; b.has(vl)) BIND(w.bias_vl, b.vector(vl, c.n_experts));
  const std::string sp = p + "shared_experts.";
  w.has_shared = c.n_shared > 0 || b.has(sp + "gate_proj.weight");
  if (w.has_shared) {
    WASTE_TRY(bind_ffn(b, sp, "gate_proj.weight", "up_proj.weight", "down_proj.weight", c.shared_inter(), hid,
                       w.shared));
  }
  if (c.latent_dim > 0) {
    BIND(w.latent_down, b.matrix(p + "routed_expert_down_proj.weight", c.latent_dim, hid));
    BIND(w.latent_up, b.matrix(p + "routed_expert_up_proj.weight", hid, c.latent_dim));
    if (c.latent_norm) BIND(w.latent_norm, b.vector(p + "routed_expert_norm.weight", c.latent_dim));
  }
  return ok();
}

Status bind_mhc(const Binder& b, const ModelConfig& c, const std::string& p, MhcWeights& w) {
  BIND(w.fn, b.matrix(p + "fn", c.hc_mix(), c.stream_width()));
  BIND(w.base, b.vector(p + "base", c.hc_mix()));
  BIND(w.scale, b.vector(p + "scale", 3));
  return ok();
}

bool has_id(const std::vector<int>& ids, int l) { return std::find(ids.begin(), ids.end(), l) != ids.end(); }

// Every tensor of the V4.1 list present with its shape (optional ones only when present).
Status check_v41_list(const Trunk& trunk, const ModelConfig& c) {
  for (const V41Tensor& t : v41_trunk_tensors(c)) {
    const TrunkTensor* found = trunk.find(t.name);
    if (found == nullptr || found->info == nullptr) {
      if (!t.required) continue;
      return make_error(Errc::format, "tensor " + t.name + ": missing");
    }
    if (found->info->shape != t.shape) {
      return make_error(Errc::format, "tensor " + t.name + ": expected shape " + shape_text(t.shape) + ", found " +
                                          shape_text(found->info->shape));
    }
  }
  return ok();
}

Status bind_csa(const Binder& b, const ModelConfig& c, int L, const std::string& p, Csa2LayerWeights& w) {
  const std::int64_t hid = c.hidden, nh = c.n_heads, hd = c.head_dim, og = c.o_groups, ol = c.o_lora_rank;
  const std::int64_t ih = c.index_n_heads, id = c.index_head_dim;
  BIND(w.wq_a, b.matrix(p + "wq_a.weight", c.q_lora, hid));
  BIND(w.q_norm, b.vector(p + "q_norm.weight", c.q_lora));
  BIND(w.wq_b, b.matrix(p + "wq_b.weight", nh * hd, c.q_lora));
  BIND(w.wkv, b.matrix(p + "wkv.weight", hd, hid));
  BIND(w.kv_norm, b.vector(p + "kv_norm.weight", hd));
  BIND(w.wo_a, b.matrix(p + "wo_a.weight", og * ol, nh * hd / og));
  BIND(w.wo_b, b.matrix(p + "wo_b.weight", hid, og * ol));
  BIND(w.attn_sink, b.vector(p + "attn_sink", nh));
  if (has_id(c.kv_source_layer_ids, L)) {
    BIND(w.c_wkv, b.matrix(p + "compressor.wkv.weight", hd, hid));
    BIND(w.c_norm, b.vector(p + "compressor.norm.weight", hd));
    if (c.compress_ratios[std::size_t(L)] > 1) BIND(w.c_wgate, b.matrix(p + "compressor.wgate.weight", hd, hid));
    if (!c.index_source_layer_ids.empty()) {
      BIND(w.i_wk, b.matrix(p + "indexer.wk.weight", id, hd));
      BIND(w.i_k_norm, b.vector(p + "indexer.k_norm.weight", id));
    }
  }
  if (has_id(c.index_source_layer_ids, L)) {
    BIND(w.i_wq_b, b.matrix(p + "indexer.wq_b.weight", ih * id, c.q_lora));
    BIND(w.i_weights_proj, b.matrix(p + "indexer.weights_proj.weight", ih, hid));
  }
  return ok();
}

Status bind_engram(const Binder& b, const ModelConfig& c, const std::string& p, EngramWeights& w) {
  const std::int64_t hid = c.hidden, hc = std::max(1, c.hc_mult);
  const std::int64_t in = std::int64_t(c.engram_max_ngram_size - 1) * c.engram_n_heads * c.engram_head_dim;
  BIND(w.wkv, b.matrix(p + "engram.wkv.weight", hid * (hc + 1), in));
  BIND(w.q_weight, b.vector(p + "engram.q_weight", hc * hid));
  BIND(w.k_weight, b.vector(p + "engram.k_weight", hc * hid));
  return ok();
}

}  // namespace

QuantMatrix row_slice(const QuantMatrix& m, std::int64_t row_begin, std::int64_t n_rows) {
  QuantMatrix s = m;
  s.payload = m.payload + row_begin * m.row_stride;
  if (m.scales != nullptr) s.scales = m.scales + row_begin * ((m.cols + m.group - 1) / m.group);
  s.rows = n_rows;
  return s;
}

Result<ModelWeights> ModelWeights::bind(const ModelConfig& c, const Trunk& trunk) {
  Binder b(trunk);
  ModelWeights w;
  if (c.is_deepseek_v41()) WASTE_TRY(check_v41_list(trunk, c));
  const std::int64_t hid = c.hidden;
  {
    const std::string name = "model.embed_tokens.weight";
    auto found = b.find(name);
    if (!found) return std::unexpected(found.error());
    const auto& shape = (*found)->info->shape;
    if (shape.size() != 2 || shape[0] != c.vocab || shape[1] != hid) {
      return make_error(Errc::format, "tensor " + name + ": expected shape " + shape_text({c.vocab, hid}) +
                                          ", found " + shape_text(shape));
    }
    w.embed = *found;
  }
  BIND(w.final_norm, b.vector("model.norm.weight", hid));
  BIND(w.lm_head, b.matrix("lm_head.weight", c.vocab, hid));
  if (c.attn_res_block > 0) {
    BIND(w.out_res_norm, b.vector("model.output_attn_res_norm.weight", hid));
    BIND(w.out_res_proj, b.vector("model.output_attn_res_proj.weight", hid));
  }
  w.layers.resize(static_cast<std::size_t>(c.n_layers));
  for (int L = 0; L < c.n_layers; ++L) {
    LayerWeights& lw = w.layers[L];
    const std::string p = "model.layers." + std::to_string(L) + ".";
    lw.index = L;
    lw.kda = c.is_kda(L);
    lw.csa = c.is_csa(L);
    lw.engram = has_id(c.engram_layer_ids, L);
    lw.moe = c.is_moe(L);
    BIND(lw.input_norm, b.vector(p + "input_layernorm.weight", hid));
    BIND(lw.post_norm, b.vector(p + "post_attention_layernorm.weight", hid));
    if (c.attn_res_block > 0) {
      BIND(lw.attn_res_norm, b.vector(p + "self_attention_res_norm.weight", hid));
      BIND(lw.attn_res_proj, b.vector(p + "self_attention_res_proj.weight", hid));
      BIND(lw.mlp_res_norm, b.vector(p + "mlp_res_norm.weight", hid));
      BIND(lw.mlp_res_proj, b.vector(p + "mlp_res_proj.weight", hid));
    }
    if (c.uses_mhc()) {
      WASTE_TRY(bind_mhc(b, c, p + "hc_attn_", lw.attn_hc));
      WASTE_TRY(bind_mhc(b, c, p + "hc_ffn_", lw.ffn_hc));
    }
    if (lw.engram) WASTE_TRY(bind_engram(b, c, p, lw.engram_w));
    if (lw.csa) {
      WASTE_TRY(bind_csa(b, c, L, p + "self_attn.", lw.csa_w));
    } else if (lw.kda) {
      WASTE_TRY(bind_kda(b, c, p + "self_attn.", lw.kda_w));
    } else {
      WASTE_TRY(bind_mla(b, c, p + "self_attn.", lw.mla_w));
    }
    if (lw.moe) {
      WASTE_TRY(bind_moe(b, c, p + "block_sparse_moe.", lw.moe_w));
    } else {
      WASTE_TRY(bind_ffn(b, p + "mlp.", "gate_proj.weight", "up_proj.weight", "down_proj.weight", c.dense_inter,
                         hid, lw.dense));
    }
  }
  return w;
}

#undef BIND

}  // namespace waste::model

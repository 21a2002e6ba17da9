#include "shared/memory/client_sizing.hpp"

#include <algorithm>

namespace waste::sizing {
namespace {

constexpr std::uint64_t kF = sizeof(float);
constexpr std::uint64_t kI = sizeof(int);
using U = std::uint64_t;

U u(int v) { return v > 0 ? U(v) : 0; }

}  // namespace

std::uint64_t StateSizes::bytes() const {
  return (U(n_kda_layers) * (kda_state + 3 * conv_ring) + U(n_mla_layers) * (latent + index_state) +
          U(n_csa_layers) * csa_window + csa_sources + blocks + hidden) *
         kF;
}

std::uint64_t MlaSizes::bytes() const {
  return (q + q_a + ckv + q_tilde + ctx_sum + scores + dot_r + o + gate + indexer) * kF;
}

std::uint64_t KdaSizes::bytes() const { return (6 * channels + low + beta) * kF; }

std::uint64_t MoeSizes::bytes() const {
  return experts * (5 * kF + 2) + top_k * (kI + kF) + lat * 3 * kF + la_ids * kI + (2 * lut_in + lut_down) * kF +
         (2 * lutq_in + lutq_down) + (2 * lut_scales_in + lut_scales_down) * kF + inter * 2 * kF + ys * kF +
         routed * kF;
}

std::uint64_t PrefillMoeSizes::bytes() const {
  return routes * (2 * kI + kF) + lut_slots * kI + xin * kF + 2 * lut * kF + 2 * lutq + 2 * lut_scales * kF + ys * kF +
         experts * 2 * kI + user_begin * kI + router * kF + ysum * kF + routed * kF + 2 * ffn * kF +
         2 * (matmul_lat + matmul_inter) * kF + (2 * group_inter + group_lut + group_lut_scales) * kF + group_lutq;
}

std::uint64_t ForwardSizes::bytes() const {
  return (4 * hidden + stream + 2 * ffn + res_scores + res_mhc + 4 * pre_hidden + pre_stream + pre_blocks +
          csa2_floats + engram_floats) * kF +
         (csa2_ints + engram_ints) * kI + csa2_selection_bytes + pre_live + pre_prompt + engram_flags +
         engram_ids * sizeof(std::uint64_t);
}

std::uint64_t engram_cache_bytes(const ModelConfig& c) { return c.uses_engram() ? kEngramCacheBytes : 0; }

std::uint64_t ClientSizes::scratch_bytes() const {
  return mla.bytes() + kda.bytes() + moe.bytes() + prefill_moe.bytes() + forward.bytes() + logits * kF + engram_cache;
}

StateSizes state_sizes(const ModelConfig& c, std::uint64_t ctx_tokens) {
  StateSizes s;
  s.n_kda_layers = c.n_kda_layers();
  s.n_mla_layers = c.n_mla_layers();
  s.kda_state = u(c.kda_heads) * u(c.kda_dim) * u(c.kda_dim);
  s.conv_ring = u(c.kda_channels()) * u(c.conv_k - 1);
  s.latent = ctx_tokens * (u(c.kv_lora) + u(c.qk_rope));
  if (c.has_indexer() && c.index_kpool > 0) {
    s.index_state = (ctx_tokens / u(c.index_kpool) + 2 * u(c.index_kpool)) * u(c.index_head_dim);
  }
  s.n_csa_layers = c.n_csa_layers();
  if (s.n_csa_layers > 0) {
    s.csa_window = u(c.sliding_window) * u(c.head_dim);
    const U per_group = u(c.head_dim) + (c.index_source_layer_ids.empty() ? 0 : u(c.index_head_dim));
    for (int l : c.kv_source_layer_ids) {
      const U ratio = u(c.compress_ratios[std::size_t(l)]);
      if (ratio == 0) continue;
      s.csa_sources += ctx_tokens / ratio * per_group + 2 * ratio * u(c.head_dim);
    }
  }
  if (c.attn_res_block > 0) s.max_blocks = c.n_layers / c.attn_res_block + 2;
  s.blocks = u(s.max_blocks) * u(c.hidden);
  s.hidden = u(c.stream_width());
  return s;
}

MlaSizes mla_sizes(const ModelConfig& c, std::uint64_t ctx_tokens, int tokens) {
  MlaSizes s;
  if (c.n_mla_layers() == 0) return s;
  const U T = u(tokens), nh = u(c.n_heads), qd = u(c.qk_nope) + u(c.qk_rope), lora = u(c.kv_lora);
  s.q = T * nh * qd;
  s.q_a = T * u(c.q_lora);
  s.ckv = T * (lora + u(c.qk_rope));
  s.q_tilde = nh * T * lora;
  s.ctx_sum = nh * lora;
  s.scores = nh * ctx_tokens;
  s.dot_r = nh * ctx_tokens;
  s.o = T * nh * u(c.v_head);
  s.gate = T * nh * u(c.v_head);
  if (c.has_indexer() && c.index_kpool > 0) {
    const U H = u(c.index_n_heads), D = u(c.index_head_dim), P = std::max<U>(ctx_tokens / u(c.index_kpool), 1);
    const U max_selected = u(c.index_topk) + u(c.index_kpool) - 1;
    s.indexer = T * H * D + 2 * T * D + T * H + H * P + P + P + T * max_selected + T;
  }
  return s;
}

KdaSizes kda_sizes(const ModelConfig& c, int tokens) {
  KdaSizes s;
  if (c.n_kda_layers() == 0) return s;
  const U T = u(tokens);
  s.channels = T * u(c.kda_channels());
  s.low = T * u(c.kda_dim);
  s.beta = T * u(c.kda_heads);
  return s;
}

std::uint64_t lut_floats(const ExpertGeometry& g, int kind) {
  return u(g.cols[kind] / g.vec_dim) * u(g.stages) * u(g.lut_entries);
}

MoeSizes moe_sizes(const ModelConfig& c, const ExpertGeometry& g) {
  MoeSizes s;
  const U E = u(c.n_experts), lat = u(c.expert_input_dim());
  s.experts = E;
  s.top_k = u(c.top_k);
  s.lat = lat;
  s.la_ids = kMaxLookahead;
  if (E == 0) return s;
  s.lut_in = lut_floats(g, 0);
  s.lut_down = lut_floats(g, 2);
  if (g.packed6) {
    s.lutq_in = s.lut_in;
    s.lutq_down = s.lut_down;
    s.lut_scales_in = lut_quant_blocks(u(g.cols[0] / g.vec_dim));
    s.lut_scales_down = lut_quant_blocks(u(g.cols[2] / g.vec_dim));
  }
  s.inter = u(std::max(g.rows[0], c.shared_inter()));
  s.ys = u(c.top_k) * lat;
  s.routed = u(c.hidden);
  return s;
}

PrefillMoeSizes prefill_moe_sizes(const ModelConfig& c, const ExpertGeometry& g, int tokens) {
  PrefillMoeSizes s;
  const U T = u(tokens), K = u(c.top_k), E = u(c.n_experts), lat = u(c.expert_input_dim());
  s.routes = T * K;
  s.xin = c.latent_dim > 0 ? T * lat : 0;
  s.lut_rows = std::min<U>(T, U(kLutRows));
  s.lut_slots = T;
  if (E > 0) {
    s.lut = s.lut_rows * lut_floats(g, 0);
    if (g.packed6) {
      s.lutq = s.lut;
      s.lut_scales = s.lut_rows * lut_quant_blocks(u(g.cols[0] / g.vec_dim));
    }
  }
  s.ys = T * K * lat;
  s.experts = E;
  s.user_begin = E + 1;
  s.router = T * E;
  s.ysum = T * lat;
  s.routed = c.latent_dim > 0 ? T * u(c.hidden) : 0;
  s.ffn = T * u(std::max({c.shared_inter(), c.dense_inter, 1}));
  if (E > 0 && !g.packed6) {  // VQ4P never takes prefill's matrix products (expert_batch.hpp)
    s.matmul_lat = T * lat;
    s.matmul_inter = T * u(c.moe_inter);
  }
  if (E > 0 && g.packed6) {
    s.group_rows = std::min<U>(T, U(kVq4pGroupTokens));
    s.group_inter = s.group_rows * u(c.moe_inter);
    s.group_lut = s.group_rows * lut_floats(g, 2);
    s.group_lutq = s.group_lut;
    s.group_lut_scales = s.group_rows * lut_quant_blocks(u(g.cols[2] / g.vec_dim));
  }
  return s;
}

ForwardSizes forward_sizes(const ModelConfig& c, int tokens, std::uint64_t ctx_tokens) {
  ForwardSizes s;
  const U T = u(tokens), H = u(c.hidden);
  s.hidden = H;
  s.stream = u(c.stream_width());
  s.ffn = u(std::max(c.dense_inter, 1));
  s.res_scores = c.attn_res_block > 0 ? u(c.n_layers / c.attn_res_block + 3) : 1;
  s.res_mhc = c.uses_mhc() ? u(c.stream_width()) + u(c.hc_mix()) + u(c.hc_mult) : 0;
  s.pre_hidden = T * H;
  s.pre_stream = T * s.stream;
  s.pre_blocks = T * u(state_sizes(c, 1).max_blocks) * H;
  s.pre_live = T;
  s.pre_prompt = T;
  if (c.n_csa_layers() > 0) {
    const U HD = u(c.n_heads) * u(c.head_dim), D = u(c.head_dim), ID = u(c.index_head_dim);
    const U G = std::max<U>(ctx_tokens, 1);
    s.csa2_floats = T * u(c.q_lora) + 2 * T * HD + 3 * T * D + T * u(c.index_n_heads) * (ID + 1) +
                    T * u(c.o_groups) * u(c.o_lora_rank) + u(c.n_heads) * (u(c.sliding_window) + u(c.index_topk)) +
                    2 * G + D + ID + 5 * (u(c.qk_rope) / 2);
    s.csa2_ints = 2 * G + T;
    s.csa2_selection_bytes = T * ((u(c.index_topk) + u(c.candidate_topk_blocks) + 2) * kI + sizeof(void*));
  }
  if (c.uses_engram()) {
    const U columns = u(c.engram_max_ngram_size - 1) * u(c.engram_n_heads);
    s.engram_floats = T * columns * u(c.engram_head_dim) + (u(c.hc_mult) + 1) * H;
    s.engram_ints = 2 * T + 1;
    s.engram_flags = T;
    s.engram_ids = T * (u(c.engram_layer_ids.size()) + 1) * columns;
  }
  return s;
}

ClientSizes client_sizes(const ModelConfig& c, const ExpertGeometry& g, std::uint64_t ctx_tokens,
                         int prefill_chunk) {
  const int T = prefill_capacity(prefill_chunk);
  ClientSizes s;
  s.state = state_sizes(c, ctx_tokens);
  s.mla = mla_sizes(c, ctx_tokens, T);
  s.kda = kda_sizes(c, T);
  s.moe = moe_sizes(c, g);
  s.prefill_moe = prefill_moe_sizes(c, g, T);
  s.forward = forward_sizes(c, T, ctx_tokens);
  s.logits = u(c.vocab);
  s.engram_cache = engram_cache_bytes(c);
  return s;
}

}  // namespace waste::sizing

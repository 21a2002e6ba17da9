// Scratch sizing: every buffer from shared/memory/client_sizing, the memory plan's own numbers.
#include "compute/forward/scratch.hpp"

namespace waste::forward {

void MlaScratch::resize(const ModelConfig& c, int ctx, int n_tokens) {
  tokens = n_tokens;
  ctx_tokens = ctx;
  const sizing::MlaSizes z = sizing::mla_sizes(c, std::uint64_t(ctx), n_tokens);
  q.assign(z.q, 0.0f);
  q_a.assign(z.q_a, 0.0f);
  ckv.assign(z.ckv, 0.0f);
  q_tilde.assign(z.q_tilde, 0.0f);
  ctx_sum.assign(z.ctx_sum, 0.0f);
  scores.assign(z.scores, 0.0f);
  dot_r.assign(z.dot_r, 0.0f);
  o.assign(z.o, 0.0f);
  gate.assign(z.gate, 0.0f);
}

void KdaScratch::resize(const ModelConfig& c, int n_tokens) {
  tokens = n_tokens;
  const sizing::KdaSizes z = sizing::kda_sizes(c, n_tokens);
  q.assign(z.channels, 0.0f);
  k.assign(z.channels, 0.0f);
  v.assign(z.channels, 0.0f);
  low.assign(z.low, 0.0f);
  g.assign(z.channels, 0.0f);
  gate.assign(z.channels, 0.0f);
  beta.assign(z.beta, 0.0f);
  o.assign(z.channels, 0.0f);
}

void MoeScratch::resize(const ModelConfig& c, const ExpertGeometry& g) {
  const sizing::MoeSizes z = sizing::moe_sizes(c, g);
  router.assign(z.experts, 0.0f);
  probs.assign(z.experts, 0.0f);
  scored.assign(z.experts, 0.0f);
  taken.assign(z.experts, 0);
  ids.assign(z.top_k, 0);
  weights.assign(z.top_k, 0.0f);
  xin.assign(z.lat, 0.0f);
  la_router.assign(z.experts, 0.0f);
  la_scored.assign(z.experts, 0.0f);
  la_taken.assign(z.experts, 0);
  la_ids.assign(z.la_ids, 0);
  if (z.experts == 0) return;
  lut_gate.assign(z.lut_in, 0.0f);
  lut_up.assign(z.lut_in, 0.0f);
  lut_down.assign(z.lut_down, 0.0f);
  lutq_gate.assign(z.lutq_in, 0);
  lutq_up.assign(z.lutq_in, 0);
  lutq_down.assign(z.lutq_down, 0);
  lutq_scale_gate.assign(z.lut_scales_in, 0.0f);
  lutq_scale_up.assign(z.lut_scales_in, 0.0f);
  lutq_scale_down.assign(z.lut_scales_down, 0.0f);
  a.assign(z.inter, 0.0f);
  b.assign(z.inter, 0.0f);
  ys.assign(z.ys, 0.0f);
  y.assign(z.lat, 0.0f);
  ysum.assign(z.lat, 0.0f);
  routed.assign(z.routed, 0.0f);
}

void PrefillMoeScratch::resize(const ModelConfig& c, const ExpertGeometry& g, int n_tokens) {
  tokens = n_tokens;
  const sizing::PrefillMoeSizes z = sizing::prefill_moe_sizes(c, g, n_tokens);
  lut_rows = int(z.lut_rows);
  lut_slot.assign(z.lut_slots, -1);
  ids.assign(z.routes, 0);
  weights.assign(z.routes, 0.0f);
  xin.assign(z.xin, 0.0f);
  lut_gate.assign(z.lut, 0.0f);
  lut_up.assign(z.lut, 0.0f);
  lutq_gate.assign(z.lutq, 0);
  lutq_up.assign(z.lutq, 0);
  lutq_scale_gate.assign(z.lut_scales, 0.0f);
  lutq_scale_up.assign(z.lut_scales, 0.0f);
  ys.assign(z.ys, 0.0f);
  distinct.clear();
  distinct.reserve(z.experts);
  user_begin.assign(z.user_begin, 0);
  users.assign(z.routes, 0);
  fill.assign(z.experts, 0);
  router.assign(z.router, 0.0f);
  ysum.assign(z.ysum, 0.0f);
  routed.assign(z.routed, 0.0f);
  fa.assign(z.ffn, 0.0f);
  fb.assign(z.ffn, 0.0f);
  mm_x.assign(z.matmul_lat, 0.0f);
  mm_y.assign(z.matmul_lat, 0.0f);
  mm_a.assign(z.matmul_inter, 0.0f);
  mm_b.assign(z.matmul_inter, 0.0f);
  group_rows = int(z.group_rows);
  group_a.assign(z.group_inter, 0.0f);
  group_b.assign(z.group_inter, 0.0f);
  group_lut_down.assign(z.group_lut, 0.0f);
  group_lutq_down.assign(z.group_lutq, 0);
  group_lutq_scale_down.assign(z.group_lut_scales, 0.0f);
}

std::uint64_t MlaScratch::bytes() const {
  return capacity_bytes(q, q_a, ckv, q_tilde, ctx_sum, scores, dot_r, o, gate);
}

std::uint64_t KdaScratch::bytes() const { return capacity_bytes(q, k, v, low, g, gate, beta, o); }

std::uint64_t MoeScratch::bytes() const {
  return capacity_bytes(router, probs, scored, taken, ids, weights, xin, lut_gate, lut_up, lut_down, lutq_gate,
                        lutq_up, lutq_down, lutq_scale_gate, lutq_scale_up, lutq_scale_down, a, b, ys, y, ysum, routed,
                        la_router, la_scored, la_taken, la_ids);
}

std::uint64_t PrefillMoeScratch::bytes() const {
  return capacity_bytes(ids, weights, xin, lut_slot, lut_gate, lut_up, lutq_gate, lutq_up, lutq_scale_gate, lutq_scale_up, ys,
                        distinct, user_begin, users, fill, router, ysum, routed, fa, fb) +
         capacity_bytes(mm_x, mm_y, mm_a, mm_b) +
         capacity_bytes(group_a, group_b, group_lut_down, group_lutq_down, group_lutq_scale_down);
}
}  // namespace waste::forward

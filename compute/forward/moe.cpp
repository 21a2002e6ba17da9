// MoE block (waste-v0-reference.md §3.6) for one token: route, read the chosen experts in
// landing order, multiply each by the RVQ table driver, sum in selection order, K3 latent
// projections and shared experts. The chunked form is moe_prefill.cpp.
#include <algorithm>
#include <cstring>
#include <string>

#include "compute/forward/ffn.hpp"
#include "compute/forward/moe.hpp"
#include "compute/forward/router.hpp"

namespace waste::forward {
namespace {

// ysum = sum_j w_j y_j in selection order (the one order decode and prefill share), then the
// K3 latent norm and up projection and the shared experts on the full x.
void finish_moe(const Exec& exec, const ModelConfig& c, const model::MoeWeights& w, const float* x,
                const float* weights, const float* ys, MoeScratch& s, float* out) {
  const int top_k = c.top_k, hid = c.hidden, lat = c.expert_input_dim();
  std::fill(s.ysum.begin(), s.ysum.end(), 0.0f);
  for (int j = 0; j < top_k; ++j) {
    const float wj = weights[j];
    const float* y = ys + std::int64_t(j) * lat;
    for (int i = 0; i < lat; ++i) s.ysum[i] += wj * y[i];
  }
  // K3: weights applied before the latent norm, then back up to the hidden width.
  const float* routed = s.ysum.data();
  if (c.latent_dim > 0) {
    if (c.latent_norm) rms_norm(s.ysum.data(), w.latent_norm.data(), lat, c.rms_eps, s.ysum.data());
    matvec_tokens(exec, w.latent_up, s.ysum.data(), lat, 1, s.routed.data(), c.hidden);
    routed = s.routed.data();
  }
  // Shared experts see the full hidden x.
  if (w.has_shared) {
    ffn_forward(exec, c, w.shared, x, s.a.data(), s.b.data(), out);
    for (int i = 0; i < hid; ++i) out[i] = routed[i] + out[i];
  } else {
    std::memcpy(out, routed, std::size_t(hid) * sizeof(float));
  }
}


}  // namespace

void route(const ModelConfig& c, const model::MoeWeights& w, const float* router_logits, MoeScratch& s,
           bool image) {
  const int top_k = c.top_k;
  if (c.is_deepseek_v41()) {
    // DeepSeek-V4.1's gate: logits / gate_temp, bias for selection only, renormalised + 1e-20,
    // x route_scale. An image-span token selects with bias_vl in place of the correction bias
    // (transformers DeepseekV41TopKRouter); a container without bias_vl routes it as text.
    const NoauxRouter r{c.scoring, c.n_experts, top_k, c.gate_temp, c.renormalize, c.routed_scale};
    const bool vl = image && !w.bias_vl.empty();
    route_noaux(r, router_logits, w.score_bias, w.bias_vl, vl,
                NoauxScratch{s.probs.data(), s.scored.data(), s.taken.data()}, s.ids.data(), s.weights.data());
    if (s.trace_ids) s.trace_ids->insert(s.trace_ids->end(), s.ids.begin(), s.ids.begin() + top_k);
    return;
  }
  router_scores(c, w.score_bias, router_logits, s.probs.data(), s.scored.data());
  router_rank(c, !w.score_bias.empty(), s.scored.data(), top_k, s.taken.data(), s.ids.data());
  for (int j = 0; j < top_k; ++j) s.weights[j] = s.probs[std::size_t(s.ids[j])];
  if (c.renormalize && top_k > 1) {
    float sum = 0.0f;
    for (int j = 0; j < top_k; ++j) sum += s.weights[j];
    for (int j = 0; j < top_k; ++j) s.weights[j] /= (sum + 1e-20f);
  }
  for (int j = 0; j < top_k; ++j) s.weights[j] *= c.routed_scale;
  if (s.trace_ids) s.trace_ids->insert(s.trace_ids->end(), s.ids.begin(), s.ids.begin() + top_k);
}

int top_ids(const ModelConfig& c, const model::MoeWeights& w, const float* router_logits, int n, float* scored,
            unsigned char* taken, int* ids) {
  // scored doubles as the probabilities' buffer: router_scores reads each p before its s'.
  router_scores(c, w.score_bias, router_logits, scored, scored);
  return router_rank(c, !w.score_bias.empty(), scored, n, taken, ids);
}

Status moe_forward(const Exec& exec, const ModelConfig& c, const model::MoeWeights& w, int layer, const float* x,
                   const ExpertContext& ex, MoeScratch& s, float* out, const MoeExtras& extras) {
  profile::Stopwatch off;
  profile::Stopwatch& watch = extras.watch ? *extras.watch : off;
  const ExpertGeometry& g = ex.geometry;
  const int top_k = c.top_k, lat = c.expert_input_dim();
  const auto base = layer_codebook_base(ex, layer);
  if (!base) return std::unexpected(base.error());

  // Router and selection.
  matvec_tokens(exec, w.router, x, c.hidden, 1, s.router.data(), w.router.rows);  // as moe_prefill's rows
  route(c, w, s.router.data(), s, extras.image);
  watch.lap(profile::Stage::router);

  // Ask for every routed record at once; the reads run while the LUTs are built.
  if (Status requested = ex.source.request_layer(layer, std::span<const int>(s.ids.data(), std::size_t(top_k)));
      !requested) {
    ex.source.release_layer(layer);  // whatever the source pinned before failing
    return requested;
  }
  watch.add(profile::Stage::io_wait);

  // K3 routes a latent projection of x; Kimi-Linear routes x itself.
  const float* xin = x;
  if (c.latent_dim > 0) {
    matvec_tokens(exec, w.latent_down, x, c.hidden, 1, s.xin.data(), lat);
    xin = s.xin.data();
    watch.add(profile::Stage::shared_ffn);
  }

  // Gate and up LUTs depend only on xin and the layer's books (the manifest's base): built
  // once per token, before the first record lands.
  const Lut gate_lut{s.lut_gate.data(), s.lutq_gate.data(), s.lutq_scale_gate.data()};
  const Lut up_lut{s.lut_up.data(), s.lutq_up.data(), s.lutq_scale_up.data()};
  const int nv_in = g.cols[0] / g.vec_dim;
  build_lut(exec, ex.codebooks, g, Codebooks::book_id(*base, 0, 0, g.stages), xin, nv_in, gate_lut);
  build_lut(exec, ex.codebooks, g, Codebooks::book_id(*base, 1, 0, g.stages), xin, nv_in, up_lut);
  watch.lap(profile::Stage::lut_build);

  // Landing order; each output goes to its selection slot.
  for (int n = 0; n < top_k; ++n) {
    auto ready = acquire_checked(ex, layer, *base);
    watch.lap(profile::Stage::io_wait);
    if (!ready) return std::unexpected(ready.error());
    run_expert(exec, c, ex, ready->view, gate_lut, up_lut, s, s.ys.data() + std::int64_t(ready->index) * lat, watch);
  }
  ex.source.release_layer(layer);
  watch.add(profile::Stage::other);

  // Lookahead: the next layer's router on this layer's input predicts its experts (§4.5).
  if (extras.next != nullptr && extras.lookahead > 0) {
    const int want = std::min({extras.lookahead, kMaxLookahead, c.n_experts});
    matvec(exec, extras.next->router, x, s.la_router.data());
    const int n = top_ids(c, *extras.next, s.la_router.data(), want, s.la_scored.data(), s.la_taken.data(),
                          s.la_ids.data());
    ex.source.prefetch(extras.next_layer, std::span<const int>(s.la_ids.data(), std::size_t(n)));
    watch.lap(profile::Stage::lookahead);
  }

  finish_moe(exec, c, w, x, s.weights.data(), s.ys.data(), s, out);
  watch.lap(profile::Stage::shared_ffn);
  return ok();
}

}  // namespace waste::forward

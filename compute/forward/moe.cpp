// MoE block (waste-v0-reference.md §3.6) and the RVQ LUT matmul driver (§2): experts are
// multiplied straight from their index data, never expanded. Per token and layer one gate LUT
// and one up LUT serve every routed expert; the down LUT is rebuilt per expert from its h.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "compute/forward/expert_batch.hpp"
#include "compute/forward/forward.hpp"
#include "compute/forward/router.hpp"
#include "shared/memory/client_sizing.hpp"

namespace waste::forward {
namespace {

constexpr int kLutMinVectors = 16;   // LUT build chunk (vector positions)
constexpr int kVq3MinBlocks = 2;     // 128 rows per chunk
constexpr int kVq4pMinBlocks = 16;   // 1024 rows per chunk

struct Lut {
  float* f32;
  std::int8_t* q;
  float* q_scales;
};

// Build the f32 LUT of x against the `stages` books starting at `first_book`; for VQ4P also
// its int8 shadow.
void build_lut(const Exec& exec, const Codebooks& books, const ExpertGeometry& g, int first_book, const float* x,
               int n_vectors, const Lut& lut) {
  const float* stage_books[8];
  for (int s = 0; s < g.stages; ++s) stage_books[s] = books.book(first_book + s).data();
  const auto* kt = &exec.kernels;
  exec.pool.parallel_for(n_vectors, kLutMinVectors, [&](std::int64_t v_begin, std::int64_t v_end) {
    kt->rvq_lut_build(x, stage_books, g.stages, g.lut_entries, g.vec_dim, int(v_begin), int(v_end), lut.f32);
  });
  if (g.packed6) kt->rvq_lut_quantize(lut.f32, n_vectors, g.stages, g.lut_entries, lut.q, lut.q_scales);
}

kernels::RvqMatrix rvq_matrix(const ExpertGeometry& g, const ExpertView& view, MatrixKind kind) {
  const int k = int(kind);
  return kernels::RvqMatrix{view.index[k], view.scales[k], g.rows[k], g.cols[k] / g.vec_dim, g.stages, g.packed6};
}

// Rows [r0, r1) of y = W x (r0 a multiple of 64).
void apply_rows(const kernels::KernelTable& kt, const kernels::RvqMatrix& m, int entries, const Lut& lut, float* y,
                int r0, int r1) {
  if (m.packed6) {
    kt.rvq_apply_vq4p(m, lut.q, lut.q_scales, y, r0, r1);
  } else {
    kt.rvq_apply(m, lut.f32, entries, y, r0, r1);
  }
}

// y = W x for one expert matrix kind, rows split by 64-row index blocks.
void apply_lut(const Exec& exec, const ExpertGeometry& g, const ExpertView& view, MatrixKind kind, const Lut& lut,
               float* y) {
  const kernels::RvqMatrix m = rvq_matrix(g, view, kind);
  const std::int64_t n_blocks = (m.rows + kIndexBlockRows - 1) / kIndexBlockRows;
  const auto* kt = &exec.kernels;
  const int entries = g.lut_entries;
  exec.pool.parallel_for(n_blocks, g.packed6 ? kVq4pMinBlocks : kVq3MinBlocks,
                         [&](std::int64_t b_begin, std::int64_t b_end) {
                           const int r0 = int(b_begin * kIndexBlockRows);
                           const int r1 = int(std::min<std::int64_t>(b_end * kIndexBlockRows, m.rows));
                           apply_rows(*kt, m, entries, lut, y, r0, r1);
                         });
}

// The manifest's codebook base of a layer, checked against each record as it lands.
Result<int> layer_codebook_base(const ExpertContext& ex, int layer) {
  if (layer < 0 || std::size_t(layer) >= ex.codebook_base.size() || ex.codebook_base[std::size_t(layer)] < 0) {
    return make_error(Errc::format, "layer " + std::to_string(layer) + ": no expert bank in the manifest");
  }
  return ex.codebook_base[std::size_t(layer)];
}

Status check_codebook(const ExpertView& view, int layer, int base) {
  if (view.codebook_id == base) return ok();
  return make_error(Errc::format, "expert " + std::to_string(view.expert) + " of layer " + std::to_string(layer) +
                                      ": record codebook_id " + std::to_string(view.codebook_id) +
                                      " differs from the manifest's codebook_base " + std::to_string(base));
}

// y = W_down act(W_gate xin, W_up xin) for one expert, given the gate and up LUTs of xin.
// Two pool jobs, not four: each row range of gate and up also gets its activation and the down
// LUT positions built from exactly those rows (position v reads h[8v, 8v+8)), so the down LUT
// needs no job of its own; then the down apply. (A job's fixed cost, mostly waking the other
// thread, is paid per expert and per job.) The down LUT build is timed as expert_matmul.
void run_expert(const Exec& exec, const ModelConfig& c, const ExpertContext& ex, const ExpertView& view,
                const Lut& gate_lut, const Lut& up_lut, MoeScratch& s, float* y, profile::Stopwatch& watch) {
  const ExpertGeometry& g = ex.geometry;
  const Lut down_lut{s.lut_down.data(), s.lutq_down.data(), s.lutq_scale_down.data()};
  const int nv_inter = g.cols[2] / g.vec_dim, inter = g.rows[0];
  const int down_book = Codebooks::book_id(view.codebook_id, 2, 0, g.stages);
  if (kIndexBlockRows % g.vec_dim != 0) {  // a down position would straddle two row ranges
    apply_lut(exec, g, view, MatrixKind::gate, gate_lut, s.a.data());
    apply_lut(exec, g, view, MatrixKind::up, up_lut, s.b.data());
    ffn_activation(c, s.a.data(), s.b.data(), inter, s.a.data());
    watch.add(profile::Stage::expert_matmul);
    build_lut(exec, ex.codebooks, g, down_book, s.a.data(), nv_inter, down_lut);
    watch.add(profile::Stage::lut_build);
    apply_lut(exec, g, view, MatrixKind::down, down_lut, y);
    watch.lap(profile::Stage::expert_matmul);
    return;
  }
  const kernels::RvqMatrix gate = rvq_matrix(g, view, MatrixKind::gate);
  const kernels::RvqMatrix up = rvq_matrix(g, view, MatrixKind::up);
  const float* down_books[8];
  for (int st = 0; st < g.stages; ++st) down_books[st] = ex.codebooks.book(down_book + st).data();
  float* a = s.a.data();
  float* b = s.b.data();
  const auto* kt = &exec.kernels;
  const std::int64_t n_blocks = (inter + kIndexBlockRows - 1) / kIndexBlockRows;
  exec.pool.parallel_for(n_blocks, g.packed6 ? kVq4pMinBlocks : kVq3MinBlocks,
                         [&](std::int64_t b_begin, std::int64_t b_end) {
                           const int r0 = int(b_begin * kIndexBlockRows);
                           const int r1 = int(std::min<std::int64_t>(b_end * kIndexBlockRows, inter));
                           apply_rows(*kt, gate, g.lut_entries, gate_lut, a, r0, r1);
                           apply_rows(*kt, up, g.lut_entries, up_lut, b, r0, r1);
                           ffn_activation(c, a + r0, b + r0, r1 - r0, a + r0);
                           kt->rvq_lut_build(a, down_books, g.stages, g.lut_entries, g.vec_dim, r0 / g.vec_dim,
                                             std::min(nv_inter, r1 / g.vec_dim), down_lut.f32);
                         });
  if (g.packed6) kt->rvq_lut_quantize(down_lut.f32, nv_inter, g.stages, g.lut_entries, down_lut.q, down_lut.q_scales);
  watch.add(profile::Stage::expert_matmul);
  apply_lut(exec, g, view, MatrixKind::down, down_lut, y);
  watch.lap(profile::Stage::expert_matmul);
}

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
    matvec(exec, w.latent_up, s.ysum.data(), s.routed.data());
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
}

void route(const ModelConfig& c, const model::MoeWeights& w, const float* router_logits, MoeScratch& s) {
  const int top_k = c.top_k;
  router_scores(c, w.score_bias, router_logits, s.probs.data(), s.scored.data());
  router_rank(c, !w.score_bias.empty(), s.scored.data(), top_k, s.taken.data(), s.ids.data());
  for (int j = 0; j < top_k; ++j) s.weights[j] = s.probs[std::size_t(s.ids[j])];
  if (c.renormalize && top_k > 1) {
    float sum = 0.0f;
    for (int j = 0; j < top_k; ++j) sum += s.weights[j];
    for (int j = 0; j < top_k; ++j) s.weights[j] /= (sum + 1e-20f);
  }
  for (int j = 0; j < top_k; ++j) s.weights[j] *= c.routed_scale;
}

int top_ids(const ModelConfig& c, const model::MoeWeights& w, const float* router_logits, int n, float* scored,
            unsigned char* taken, int* ids) {
  // scored doubles as the probabilities' buffer: router_scores reads each p before its s'.
  router_scores(c, w.score_bias, router_logits, scored, scored);
  return router_rank(c, !w.score_bias.empty(), scored, n, taken, ids);
}

void ffn_forward(const Exec& exec, const ModelConfig& c, const model::FfnWeights& w, const float* x, float* a,
                 float* b, float* out) {
  matvec(exec, w.gate, x, a);
  matvec(exec, w.up, x, b);
  ffn_activation(c, a, b, int(w.gate.rows), a);
  matvec(exec, w.down, a, out);
}

void ffn_tokens(const Exec& exec, const ModelConfig& c, const model::FfnWeights& w, const float* x, int n, float* a,
                float* b, float* out) {
  const std::int64_t hid = c.hidden, inter = w.gate.rows;
  matvec_tokens(exec, w.gate, x, hid, n, a, inter);
  matvec_tokens(exec, w.up, x, hid, n, b, inter);
  for (int t = 0; t < n; ++t) ffn_activation(c, a + t * inter, b + t * inter, int(inter), a + t * inter);
  matvec_tokens(exec, w.down, a, inter, n, out, hid);
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
  matvec(exec, w.router, x, s.router.data());
  route(c, w, s.router.data(), s);
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
    matvec(exec, w.latent_down, x, s.xin.data());
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
    auto ready = ex.source.acquire_next(layer);
    watch.lap(profile::Stage::io_wait);
    Status checked = ready ? check_codebook(ready->view, layer, *base) : Status(std::unexpected(ready.error()));
    if (!checked) {
      ex.source.release_layer(layer);
      return checked;
    }
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

Status moe_prefill(const Exec& exec, const ModelConfig& c, const model::MoeWeights& w, int layer, const float* x,
                   int n_tokens, const ExpertContext& ex, MoeScratch& s, PrefillMoeScratch& p, float* out,
                   int window, profile::Stopwatch* watch_in) {
  profile::Stopwatch off;
  profile::Stopwatch& watch = watch_in ? *watch_in : off;
  const ExpertGeometry& g = ex.geometry;
  const int E = c.n_experts, K = c.top_k, hid = c.hidden, lat = c.expert_input_dim();
  const auto base = layer_codebook_base(ex, layer);
  if (!base) return std::unexpected(base.error());
  if (n_tokens > p.tokens) {
    return make_error(Errc::argument, "prefill chunk of " + std::to_string(n_tokens) + " tokens exceeds " +
                                          std::to_string(p.tokens));
  }
  window = std::max(window, 1);

  // Route every token; keep its ids and weights in selection order.
  matvec_tokens(exec, w.router, x, hid, n_tokens, p.router.data(), E);
  for (int t = 0; t < n_tokens; ++t) {
    route(c, w, p.router.data() + std::int64_t(t) * E, s);
    std::copy_n(s.ids.data(), K, p.ids.data() + std::int64_t(t) * K);
    std::copy_n(s.weights.data(), K, p.weights.data() + std::int64_t(t) * K);
    watch.lap(profile::Stage::router);
  }

  // Distinct experts in ascending id, and per expert its users (t * K + j) in token order.
  std::fill(p.fill.begin(), p.fill.end(), 0);
  for (int u = 0; u < n_tokens * K; ++u) ++p.fill[std::size_t(p.ids[std::size_t(u)])];
  p.distinct.clear();
  p.user_begin[0] = 0;
  for (int e = 0; e < E; ++e) {
    if (p.fill[std::size_t(e)] > 0) p.distinct.push_back(e);
    p.user_begin[std::size_t(e) + 1] = p.user_begin[std::size_t(e)] + p.fill[std::size_t(e)];
    p.fill[std::size_t(e)] = p.user_begin[std::size_t(e)];
  }
  for (int u = 0; u < n_tokens * K; ++u) p.users[std::size_t(p.fill[std::size_t(p.ids[std::size_t(u)])]++)] = u;

  const int n_distinct = int(p.distinct.size());
  auto request_window = [&](int begin) -> Status {
    const int n = std::min(window, n_distinct - begin);
    Status requested = ex.source.request_layer(layer, std::span<const int>(p.distinct.data() + begin, std::size_t(n)));
    if (!requested) {
      ex.source.release_layer(layer);
    } else if (const int next = begin + n; next < n_distinct) {
      // The next window's reads queue behind this one's (unpinned, so never more than the cache
      // holds): the disk keeps reading while this window computes, not only between windows.
      ex.source.prefetch(layer, std::span<const int>(p.distinct.data() + next,
                                                     std::size_t(std::min(window, n_distinct - next))));
    }
    watch.add(profile::Stage::io_wait);
    return requested;
  };
  WASTE_TRY(request_window(0));

  // Per token: the routed input and its gate/up LUTs (while the first window reads).
  const std::size_t lut_in = std::size_t(sizing::lut_floats(g, 0));
  const std::size_t q_blocks = g.packed6 ? std::size_t(kernels::lut_quant_blocks(g.cols[0] / g.vec_dim)) : 0;
  const int nv_in = g.cols[0] / g.vec_dim;
  auto token_luts = [&](int t) {
    const std::size_t q_off = g.packed6 ? std::size_t(t) * lut_in : 0;
    const std::size_t s_off = std::size_t(t) * q_blocks;
    return std::pair<Lut, Lut>{
        Lut{p.lut_gate.data() + std::size_t(t) * lut_in, p.lutq_gate.data() + q_off, p.lutq_scale_gate.data() + s_off},
        Lut{p.lut_up.data() + std::size_t(t) * lut_in, p.lutq_up.data() + q_off, p.lutq_scale_up.data() + s_off}};
  };
  if (c.latent_dim > 0) {
    matvec_tokens(exec, w.latent_down, x, hid, n_tokens, p.xin.data(), lat);
    watch.add(profile::Stage::shared_ffn);
  }
  for (int t = 0; t < n_tokens; ++t) {
    const float* xin = c.latent_dim > 0 ? p.xin.data() + std::int64_t(t) * lat : x + std::int64_t(t) * hid;
    const auto [gate_lut, up_lut] = token_luts(t);
    build_lut(exec, ex.codebooks, g, Codebooks::book_id(*base, 0, 0, g.stages), xin, nv_in, gate_lut);
    build_lut(exec, ex.codebooks, g, Codebooks::book_id(*base, 1, 0, g.stages), xin, nv_in, up_lut);
    watch.lap(profile::Stage::lut_build);
  }

  // Each distinct expert once, in landing order, applied to every token that chose it.
  for (int begin = 0; begin < n_distinct;) {
    const int n = std::min(window, n_distinct - begin);
    for (int i = 0; i < n; ++i) {
      auto ready = ex.source.acquire_next(layer);
      watch.lap(profile::Stage::io_wait);
      Status checked = ready ? check_codebook(ready->view, layer, *base) : Status(std::unexpected(ready.error()));
      if (!checked) {
        ex.source.release_layer(layer);
        return checked;
      }
      const int expert = p.distinct[std::size_t(begin + ready->index)];
      const int u0 = p.user_begin[std::size_t(expert)], u1 = p.user_begin[std::size_t(expert) + 1];
      if (expert_batch::wanted(g, u1 - u0)) {  // decode the expert once, multiply all its tokens
        expert_batch::run(exec, c, ex, ready->view, c.latent_dim > 0 ? p.xin.data() : x, c.latent_dim > 0 ? lat : hid,
                          std::span<const int>(p.users.data() + u0, std::size_t(u1 - u0)), K, p.ys.data(), watch);
        continue;
      }
      for (int k = u0; k < u1; ++k) {
        const int u = p.users[std::size_t(k)];
        const auto [gate_lut, up_lut] = token_luts(u / K);
        run_expert(exec, c, ex, ready->view, gate_lut, up_lut, s, p.ys.data() + std::int64_t(u) * lat, watch);
      }
    }
    ex.source.release_layer(layer);
    begin += n;
    if (begin < n_distinct) WASTE_TRY(request_window(begin));
  }
  watch.add(profile::Stage::other);

  // Per token: the weighted sum in selection order (as finish_moe), then the K3 latent norm.
  for (int t = 0; t < n_tokens; ++t) {
    const float* weights = p.weights.data() + std::int64_t(t) * K;
    const float* ys = p.ys.data() + std::int64_t(t) * K * lat;
    float* ysum = p.ysum.data() + std::int64_t(t) * lat;
    std::fill(ysum, ysum + lat, 0.0f);
    for (int j = 0; j < K; ++j) {
      const float wj = weights[j];
      const float* y = ys + std::int64_t(j) * lat;
      for (int i = 0; i < lat; ++i) ysum[i] += wj * y[i];
    }
    if (c.latent_dim > 0 && c.latent_norm) rms_norm(ysum, w.latent_norm.data(), lat, c.rms_eps, ysum);
  }
  const float* routed = p.ysum.data();
  if (c.latent_dim > 0) {
    matvec_tokens(exec, w.latent_up, p.ysum.data(), lat, n_tokens, p.routed.data(), hid);
    routed = p.routed.data();
  }
  // Shared experts on the full x of every token, trunk rows shared across the chunk.
  const std::int64_t total = std::int64_t(n_tokens) * hid;
  if (w.has_shared) {
    ffn_tokens(exec, c, w.shared, x, n_tokens, p.fa.data(), p.fb.data(), out);
    for (std::int64_t i = 0; i < total; ++i) out[i] = routed[i] + out[i];
  } else {
    std::memcpy(out, routed, std::size_t(total) * sizeof(float));
  }
  watch.lap(profile::Stage::shared_ffn);
  return ok();
}

}  // namespace waste::forward

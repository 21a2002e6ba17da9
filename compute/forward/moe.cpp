// MoE block (waste-v0-reference.md §3.6) and the RVQ LUT matmul driver (§2): experts are
// multiplied straight from their index data, never expanded. Per token and layer one gate LUT
// and one up LUT serve every routed expert; the down LUT is rebuilt per expert from its h.
#include <algorithm>
#include <cstring>

#include "compute/forward/forward.hpp"

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
    kt->rvq_lut_build(x, stage_books, g.stages, g.entries, g.vec_dim, int(v_begin), int(v_end), lut.f32);
  });
  if (g.packed6) kt->rvq_lut_quantize(lut.f32, n_vectors, g.stages, g.entries, lut.q, lut.q_scales);
}

// y = W x for one expert matrix kind, rows split by 64-row index blocks.
void apply_lut(const Exec& exec, const ExpertGeometry& g, const ExpertView& view, MatrixKind kind, const Lut& lut,
               float* y) {
  const int k = int(kind);
  kernels::RvqMatrix m{};
  m.index = view.index[k];
  m.scales = view.scales[k];
  m.rows = g.rows[k];
  m.n_vectors = g.cols[k] / g.vec_dim;
  m.stages = g.stages;
  m.packed6 = g.packed6;
  const std::int64_t n_blocks = (m.rows + kIndexBlockRows - 1) / kIndexBlockRows;
  const auto* kt = &exec.kernels;
  const int entries = g.entries;
  exec.pool.parallel_for(n_blocks, g.packed6 ? kVq4pMinBlocks : kVq3MinBlocks,
                         [&](std::int64_t b_begin, std::int64_t b_end) {
                           const int r0 = int(b_begin * kIndexBlockRows);
                           const int r1 = int(std::min<std::int64_t>(b_end * kIndexBlockRows, m.rows));
                           if (m.packed6) {
                             kt->rvq_apply_vq4p(m, lut.q, lut.q_scales, y, r0, r1);
                           } else {
                             kt->rvq_apply(m, lut.f32, entries, y, r0, r1);
                           }
                         });
}

}  // namespace

void MoeScratch::resize(const ModelConfig& c, const ExpertGeometry& g) {
  const std::size_t E = std::size_t(c.n_experts), lat = std::size_t(c.expert_input_dim());
  router.assign(E, 0.0f);
  probs.assign(E, 0.0f);
  scored.assign(E, 0.0f);
  taken.assign(E, 0);
  ids.assign(std::size_t(c.top_k), 0);
  weights.assign(std::size_t(c.top_k), 0.0f);
  xin.assign(lat, 0.0f);
  if (E == 0) return;
  const std::size_t per_vector = std::size_t(g.stages) * g.entries;
  const int nv_in = g.cols[0] / g.vec_dim, nv_inter = g.cols[2] / g.vec_dim;
  lut_gate.assign(nv_in * per_vector, 0.0f);
  lut_up.assign(nv_in * per_vector, 0.0f);
  lut_down.assign(nv_inter * per_vector, 0.0f);
  if (g.packed6) {
    lutq_gate.assign(nv_in * per_vector, 0);
    lutq_up.assign(nv_in * per_vector, 0);
    lutq_down.assign(nv_inter * per_vector, 0);
    lutq_scale_gate.assign(std::size_t(kernels::lut_quant_blocks(nv_in)), 0.0f);
    lutq_scale_up.assign(std::size_t(kernels::lut_quant_blocks(nv_in)), 0.0f);
    lutq_scale_down.assign(std::size_t(kernels::lut_quant_blocks(nv_inter)), 0.0f);
  }
  const std::size_t inter = std::size_t(std::max(g.rows[0], c.shared_inter()));
  a.assign(inter, 0.0f);
  b.assign(inter, 0.0f);
  y.assign(lat, 0.0f);
  ysum.assign(lat, 0.0f);
  routed.assign(std::size_t(c.hidden), 0.0f);
}

void route(const ModelConfig& c, const model::MoeWeights& w, const float* router_logits, MoeScratch& s) {
  const int E = c.n_experts, top_k = c.top_k;
  for (int e = 0; e < E; ++e) {
    s.probs[e] = sigmoid(router_logits[e]);
    s.scored[e] = w.score_bias.empty() ? s.probs[e] : s.probs[e] + w.score_bias[e];
    s.taken[e] = 0;
  }
  // k full scans keeping the first strict maximum: ties go to the lower id, order is kept.
  for (int j = 0; j < top_k; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      if (s.taken[e]) continue;
      if (best < 0 || s.scored[e] > s.scored[best]) best = e;
    }
    s.taken[best] = 1;
    s.ids[j] = best;
    s.weights[j] = s.probs[best];
  }
  if (c.renormalize && top_k > 1) {
    float sum = 0.0f;
    for (int j = 0; j < top_k; ++j) sum += s.weights[j];
    for (int j = 0; j < top_k; ++j) s.weights[j] /= (sum + 1e-20f);
  }
  for (int j = 0; j < top_k; ++j) s.weights[j] *= c.routed_scale;
}

void ffn_forward(const Exec& exec, const ModelConfig& c, const model::FfnWeights& w, const float* x, float* a,
                 float* b, float* out) {
  matvec(exec, w.gate, x, a);
  matvec(exec, w.up, x, b);
  ffn_activation(c, a, b, int(w.gate.rows), a);
  matvec(exec, w.down, a, out);
}

Status moe_forward(const Exec& exec, const ModelConfig& c, const model::MoeWeights& w, int layer, const float* x,
                   const ExpertContext& ex, MoeScratch& s, float* out) {
  const ExpertGeometry& g = ex.geometry;
  const int top_k = c.top_k, hid = c.hidden, lat = c.expert_input_dim();

  // Router and selection.
  matvec(exec, w.router, x, s.router.data());
  route(c, w, s.router.data(), s);

  // Ask for every routed record at once, then take them in selection order.
  if (Status requested = ex.source.request(layer, std::span<const int>(s.ids.data(), std::size_t(top_k)));
      !requested) {
    ex.source.release_layer(layer);  // whatever the source pinned before failing
    return requested;
  }

  // K3 routes a latent projection of x; Kimi-Linear routes x itself.
  const float* xin = x;
  if (c.latent_dim > 0) {
    matvec(exec, w.latent_down, x, s.xin.data());
    xin = s.xin.data();
  }

  const Lut gate_lut{s.lut_gate.data(), s.lutq_gate.data(), s.lutq_scale_gate.data()};
  const Lut up_lut{s.lut_up.data(), s.lutq_up.data(), s.lutq_scale_up.data()};
  const Lut down_lut{s.lut_down.data(), s.lutq_down.data(), s.lutq_scale_down.data()};
  const int nv_in = g.cols[0] / g.vec_dim, nv_inter = g.cols[2] / g.vec_dim, inter = g.rows[0];

  std::fill(s.ysum.begin(), s.ysum.end(), 0.0f);
  for (int j = 0; j < top_k; ++j) {
    auto view = ex.source.acquire(layer, s.ids[j]);
    if (!view) {
      ex.source.release_layer(layer);
      return std::unexpected(view.error());
    }
    if (j == 0) {
      // Gate and up LUTs depend only on xin and the layer's books: built once per token.
      build_lut(exec, ex.codebooks, g, Codebooks::book_id(view->codebook_id, 0, 0, g.stages), xin, nv_in, gate_lut);
      build_lut(exec, ex.codebooks, g, Codebooks::book_id(view->codebook_id, 1, 0, g.stages), xin, nv_in, up_lut);
    }
    apply_lut(exec, g, *view, MatrixKind::gate, gate_lut, s.a.data());
    apply_lut(exec, g, *view, MatrixKind::up, up_lut, s.b.data());
    ffn_activation(c, s.a.data(), s.b.data(), inter, s.a.data());
    build_lut(exec, ex.codebooks, g, Codebooks::book_id(view->codebook_id, 2, 0, g.stages), s.a.data(), nv_inter,
              down_lut);
    apply_lut(exec, g, *view, MatrixKind::down, down_lut, s.y.data());
    const float wj = s.weights[j];
    for (int i = 0; i < lat; ++i) s.ysum[i] += wj * s.y[i];
  }
  ex.source.release_layer(layer);

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
  return ok();
}

}  // namespace waste::forward

// The RVQ table driver: LUT builds and applies split over the pool, one expert end to end
// (rvq_driver.hpp).
#include "compute/forward/rvq_driver.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <string>

#include "compute/forward/lut_mode.hpp"
#include "shared/memory/client_sizing.hpp"

namespace waste::forward {
namespace {

constexpr int kLutMinVectors = 16;   // LUT build chunk (vector positions)
constexpr int kVq3MinBlocks = 2;     // 128 rows per chunk
constexpr int kVq4pMinBlocks = 8;    // 512 rows per chunk

// Rows [r0, r1) of y = W x (r0 a multiple of 64).
void apply_rows(const kernels::KernelTable& kt, const kernels::RvqMatrix& m, int entries, bool q16, const Lut& lut,
                float* y, int r0, int r1) {
  if (m.packed6) {
    kt.rvq_apply_vq4p(m, lut.q, lut.q_scales, y, r0, r1);
  } else if (q16) {
    kt.rvq_apply_q16(m, lut.f32, entries, y, r0, r1);
  } else {
    kt.rvq_apply(m, lut.f32, entries, y, r0, r1);
  }
}

// ok when a landed record uses the layer's books (the manifest's codebook_base).
Status check_codebook(const ExpertView& view, int layer, int base) {
  if (view.codebook_id == base) return ok();
  return make_error(Errc::format, "expert " + std::to_string(view.expert) + " of layer " + std::to_string(layer) +
                                      ": record codebook_id " + std::to_string(view.codebook_id) +
                                      " differs from the manifest's codebook_base " + std::to_string(base));
}

}  // namespace

kernels::RvqMatrix rvq_matrix(const ExpertGeometry& g, const ExpertView& view, MatrixKind kind) {
  const int k = int(kind);
  return kernels::RvqMatrix{view.index[k], view.scales[k], g.rows[k], g.cols[k] / g.vec_dim, g.stages, g.packed6};
}

// Build the f32 LUT of x against the `stages` books starting at `first_book`; for VQ4P also
// its int8 shadow.
void build_lut(const Exec& exec, const Codebooks& books, const ExpertGeometry& g, int first_book, const float* x,
               int n_vectors, const Lut& lut) {
  const float* stage_books[8];
  for (int s = 0; s < g.stages; ++s) stage_books[s] = books.book(first_book + s).data();
  const auto* kt = &exec.kernels;
  const bool q16 = lut_q16(g);
  exec.pool.parallel_for(n_vectors, kLutMinVectors, [&](std::int64_t v_begin, std::int64_t v_end) {
    kt->rvq_lut_build(x, stage_books, g.stages, g.lut_entries, g.vec_dim, int(v_begin), int(v_end), lut.f32);
    if (q16) kt->rvq_lut_to_q16(lut.f32, g.stages, g.lut_entries, int(v_begin), int(v_end));
  });
  if (g.packed6) kt->rvq_lut_quantize(lut.f32, n_vectors, g.stages, g.lut_entries, lut.q, lut.q_scales);
}

// y = W x for one expert matrix kind, rows split by 64-row index blocks.
void apply_lut(const Exec& exec, const ExpertGeometry& g, const ExpertView& view, MatrixKind kind, const Lut& lut,
               float* y) {
  const kernels::RvqMatrix m = rvq_matrix(g, view, kind);
  const std::int64_t n_blocks = (m.rows + kIndexBlockRows - 1) / kIndexBlockRows;
  const auto* kt = &exec.kernels;
  const int entries = g.lut_entries;
  const bool q16 = lut_q16(g);
  exec.pool.parallel_for(n_blocks, g.packed6 ? kVq4pMinBlocks : kVq3MinBlocks,
                         [&](std::int64_t b_begin, std::int64_t b_end) {
                           const int r0 = int(b_begin * kIndexBlockRows);
                           const int r1 = int(std::min<std::int64_t>(b_end * kIndexBlockRows, m.rows));
                           apply_rows(*kt, m, entries, q16, lut, y, r0, r1);
                         });
}

// The manifest's codebook base of a layer, checked against each record as it lands.
Result<int> layer_codebook_base(const ExpertContext& ex, int layer) {
  if (layer < 0 || std::size_t(layer) >= ex.codebook_base.size() || ex.codebook_base[std::size_t(layer)] < 0) {
    return make_error(Errc::format, "layer " + std::to_string(layer) + ": no expert bank in the manifest");
  }
  return ex.codebook_base[std::size_t(layer)];
}


Result<ReadyExpert> acquire_checked(const ExpertContext& ex, int layer, int base) {
  auto ready = ex.source.acquire_next(layer);
  Status checked = ready ? check_codebook(ready->view, layer, base) : Status(std::unexpected(ready.error()));
  if (!checked) {
    ex.source.release_layer(layer);
    return std::unexpected(checked.error());
  }
  return ready;
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
  const bool q16 = lut_q16(g);
  // Every chunk starts on a whole VQ4P LUT block (kLutQuantBlock positions) when the minimum chunk
  // is a multiple of one: each chunk then quantises its own blocks of the down LUT (the same
  // values, block by block) instead of the caller doing all of them after the join.
  const std::int64_t min_blocks = g.packed6 ? kVq4pMinBlocks : kVq3MinBlocks;
  const bool quantize_in_chunks =
      g.packed6 && (min_blocks * kIndexBlockRows / g.vec_dim) % kernels::kLutQuantBlock == 0;
  const std::int64_t per_vector = std::int64_t(g.stages) * g.lut_entries;
  exec.pool.parallel_for(n_blocks, min_blocks,
                         [&](std::int64_t b_begin, std::int64_t b_end) {
                           const int r0 = int(b_begin * kIndexBlockRows);
                           const int r1 = int(std::min<std::int64_t>(b_end * kIndexBlockRows, inter));
                           apply_rows(*kt, gate, g.lut_entries, q16, gate_lut, a, r0, r1);
                           apply_rows(*kt, up, g.lut_entries, q16, up_lut, b, r0, r1);
                           ffn_activation(c, a + r0, b + r0, r1 - r0, a + r0);
                           const int v0 = r0 / g.vec_dim, v1 = std::min(nv_inter, r1 / g.vec_dim);
                           kt->rvq_lut_build(a, down_books, g.stages, g.lut_entries, g.vec_dim, v0, v1, down_lut.f32);
                           if (q16) kt->rvq_lut_to_q16(down_lut.f32, g.stages, g.lut_entries, v0, v1);
                           if (quantize_in_chunks && v1 > v0) {
                             kt->rvq_lut_quantize(down_lut.f32 + v0 * per_vector, v1 - v0, g.stages, g.lut_entries,
                                                  down_lut.q + v0 * per_vector,
                                                  down_lut.q_scales + v0 / kernels::kLutQuantBlock);
                           }
                         });
  if (g.packed6 && !quantize_in_chunks) {
    kt->rvq_lut_quantize(down_lut.f32, nv_inter, g.stages, g.lut_entries, down_lut.q, down_lut.q_scales);
  }
  watch.add(profile::Stage::expert_matmul);
  apply_lut(exec, g, view, MatrixKind::down, down_lut, y);
  watch.lap(profile::Stage::expert_matmul);
}

bool groups_tokens(const ExpertGeometry& g) { return g.packed6 && kIndexBlockRows % g.vec_dim == 0; }

void run_expert_tokens(const Exec& exec, const ModelConfig& c, const ExpertContext& ex, const ExpertView& view,
                       std::span<const Lut> gate_luts, std::span<const Lut> up_luts, const ExpertGroupScratch& gs,
                       std::span<float* const> ys, profile::Stopwatch& watch) {
  const ExpertGeometry& g = ex.geometry;
  const int n = int(ys.size());
  assert(groups_tokens(g) && n <= gs.rows && n <= sizing::kVq4pGroupTokens);
  assert(gate_luts.size() == ys.size() && up_luts.size() == ys.size());
  const int nv_inter = g.cols[2] / g.vec_dim, inter = g.rows[0];
  const std::int64_t lut = std::int64_t(sizing::lut_floats(g, 2));
  const std::int64_t q_blocks = kernels::lut_quant_blocks(nv_inter);
  const int down_book = Codebooks::book_id(view.codebook_id, 2, 0, g.stages);
  const float* down_books[8];
  for (int st = 0; st < g.stages; ++st) down_books[st] = ex.codebooks.book(down_book + st).data();
  std::array<const std::int8_t*, sizing::kVq4pGroupTokens> gate_q{}, up_q{}, down_q{};
  std::array<const float*, sizing::kVq4pGroupTokens> gate_s{}, up_s{}, down_s{};
  std::array<float*, sizing::kVq4pGroupTokens> a{}, b{};
  for (int t = 0; t < n; ++t) {
    gate_q[t] = gate_luts[t].q, gate_s[t] = gate_luts[t].q_scales;
    up_q[t] = up_luts[t].q, up_s[t] = up_luts[t].q_scales;
    down_q[t] = gs.lutq_down + t * lut, down_s[t] = gs.lutq_scale_down + t * q_blocks;
    a[t] = gs.a + std::int64_t(t) * inter, b[t] = gs.b + std::int64_t(t) * inter;
  }
  const kernels::RvqMatrix gate = rvq_matrix(g, view, MatrixKind::gate);
  const kernels::RvqMatrix up = rvq_matrix(g, view, MatrixKind::up);
  const kernels::RvqMatrix down = rvq_matrix(g, view, MatrixKind::down);
  const auto* kt = &exec.kernels;
  // As run_expert: each row range of gate and up also gets its activation and the down LUT
  // positions built from exactly those rows.
  exec.pool.parallel_for((inter + kIndexBlockRows - 1) / kIndexBlockRows, kVq4pMinBlocks,
                         [&](std::int64_t b_begin, std::int64_t b_end) {
                           const int r0 = int(b_begin * kIndexBlockRows);
                           const int r1 = int(std::min<std::int64_t>(b_end * kIndexBlockRows, inter));
                           kernels::rvq_apply_vq4p_each(*kt, gate, n, gate_q.data(), gate_s.data(), a.data(), r0, r1);
                           kernels::rvq_apply_vq4p_each(*kt, up, n, up_q.data(), up_s.data(), b.data(), r0, r1);
                           const int v0 = r0 / g.vec_dim, v1 = std::min(nv_inter, r1 / g.vec_dim);
                           for (int t = 0; t < n; ++t) {
                             ffn_activation(c, a[t] + r0, b[t] + r0, r1 - r0, a[t] + r0);
                             kt->rvq_lut_build(a[t], down_books, g.stages, g.lut_entries, g.vec_dim, v0, v1,
                                               gs.lut_down + t * lut);
                           }
                         });
  for (int t = 0; t < n; ++t) {
    kt->rvq_lut_quantize(gs.lut_down + t * lut, nv_inter, g.stages, g.lut_entries, gs.lutq_down + t * lut,
                         gs.lutq_scale_down + t * q_blocks);
  }
  watch.add(profile::Stage::expert_matmul);
  exec.pool.parallel_for((down.rows + kIndexBlockRows - 1) / kIndexBlockRows, kVq4pMinBlocks,
                         [&](std::int64_t b_begin, std::int64_t b_end) {
                           const int r0 = int(b_begin * kIndexBlockRows);
                           const int r1 = int(std::min<std::int64_t>(b_end * kIndexBlockRows, down.rows));
                           kernels::rvq_apply_vq4p_each(*kt, down, n, down_q.data(), down_s.data(), ys.data(), r0, r1);
                         });
  watch.lap(profile::Stage::expert_matmul);
}

}  // namespace waste::forward

// The RVQ table driver (waste-v0-reference.md §2): an expert's matrices are multiplied straight
// from their index data, never expanded. A LUT holds x's dot products with every codebook entry
// per vector position; a row of W x is then a sum of looked-up entries. Per token and layer one
// gate LUT and one up LUT serve every routed expert; the down LUT is rebuilt per expert from its
// activation. The kernels (compute/kernels) do the arithmetic; this file splits the work over
// the pool and strings gate, up, activation, down together.
#pragma once

#include <cstdint>
#include <span>

#include "compute/expert_source.hpp"
#include "compute/forward/ops.hpp"
#include "compute/forward/scratch.hpp"
#include "compute/profile/profile.hpp"
#include "shared/container/codebooks.hpp"
#include "shared/container/expert_record.hpp"
#include "shared/result.hpp"

namespace waste::forward {

struct ExpertContext {
  ExpertSource& source;
  const Codebooks& codebooks;
  const ExpertGeometry& geometry;
  std::span<const int> codebook_base;  // per layer, the manifest bank's codebook_base (-1: no bank)
};

// One LUT: f32 entries and, for VQ4P, its int8 shadow with per-block scales.
struct Lut {
  float* f32;
  std::int8_t* q;
  float* q_scales;
};

// Build the f32 LUT of x against the `stages` books starting at `first_book`; for VQ4P also
// its int8 shadow.
void build_lut(const Exec& exec, const Codebooks& books, const ExpertGeometry& g, int first_book, const float* x,
               int n_vectors, const Lut& lut);

// One matrix kind of an expert record as the kernels take it.
kernels::RvqMatrix rvq_matrix(const ExpertGeometry& g, const ExpertView& view, MatrixKind kind);

// y = W x for one expert matrix kind, rows split by 64-row index blocks.
void apply_lut(const Exec& exec, const ExpertGeometry& g, const ExpertView& view, MatrixKind kind, const Lut& lut,
               float* y);

// The manifest's codebook base of a layer, checked against each record as it lands.
Result<int> layer_codebook_base(const ExpertContext& ex, int layer);
// The next record of the layer's current request to land (ExpertSource::acquire_next), checked
// against the layer's books (`base`): on a failed read or a record whose codebook_id differs
// (an error naming expert, layer and both ids) the layer's records are released and the error
// returned.
Result<ReadyExpert> acquire_checked(const ExpertContext& ex, int layer, int base);

// y = W_down act(W_gate xin, W_up xin) for one expert, given the gate and up LUTs of xin.
// Two pool jobs, not four: each row range of gate and up also gets its activation and the down
// LUT positions built from exactly those rows (position v reads h[8v, 8v+8)), so the down LUT
// needs no job of its own; then the down apply. (A job's fixed cost, mostly waking the other
// thread, is paid per expert and per job.) The down LUT build is timed as expert_matmul.
void run_expert(const Exec& exec, const ModelConfig& c, const ExpertContext& ex, const ExpertView& view,
                const Lut& gate_lut, const Lut& up_lut, MoeScratch& s, float* y, profile::Stopwatch& watch);

// One VQ4P expert's group of tokens on the LUT path (PrefillMoeScratch's group vectors): token t's
// gate/up rows at a + t * inter, b + t * inter; its down LUT at lut_down + t * lut, its int8 shadow
// and block scales likewise.
struct ExpertGroupScratch {
  int rows;  // tokens at most
  float* a;
  float* b;
  float* lut_down;
  std::int8_t* lutq_down;
  float* lutq_scale_down;
};

// Whether run_expert_tokens takes this geometry (VQ4P, a down position within one 64-row block).
bool groups_tokens(const ExpertGeometry& g);

// run_expert for up to gs.rows tokens of one VQ4P expert: token t's gate and up LUTs gate_luts[t],
// up_luts[t], its output ys[t]. Each matrix's index is read once for the group where the kernel
// table can (rvq_apply_vq4p_tokens); every token's output has run_expert's bits (the same kernels
// on the same row and position ranges).
void run_expert_tokens(const Exec& exec, const ModelConfig& c, const ExpertContext& ex, const ExpertView& view,
                       std::span<const Lut> gate_luts, std::span<const Lut> up_luts, const ExpertGroupScratch& gs,
                       std::span<float* const> ys, profile::Stopwatch& watch);

}  // namespace waste::forward

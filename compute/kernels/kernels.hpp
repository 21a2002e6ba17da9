// The hot loops, ISA-free: raw pointers and counts, no SIMD types cross this header.
// generic.cpp holds the scalar reference; ISA files (avx2.cpp, ...) implement the same
// signatures and dispatch.cpp fills the KernelTable once at start-up (WASTE_FORCE_ISA
// overrides). Every entry works on a row range [row_begin, row_end) so the thread pool can
// split by rows; results never depend on how the rows were split.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace waste::kernels {

// A quantised trunk matrix as stored in the trunk image (waste-v0-reference.md §1.5).
struct QuantMatrix {
  const std::uint8_t* payload;    // rows x row_stride bytes
  const std::uint16_t* scales;    // rows x n_groups fp16 (row-major); nullptr for f32
  std::int64_t rows;
  std::int64_t cols;              // N (unpadded)
  std::int64_t row_stride;        // payload bytes per row
  int group;                      // 128 in every v0 container
  std::uint8_t fmt;               // TensorFormat: 0 f32, 2 q8g, 3 q4g, 7 q3g
};

// One expert matrix's RVQ index data as it sits in the record (blocked by 64 rows).
struct RvqMatrix {
  const std::uint8_t* index;      // [row_block][vector][row_in_block][run]
  const std::uint16_t* scales;    // rows fp16 row scales (may be unaligned)
  int rows;                       // M
  int n_vectors;                  // N / vec_dim
  int stages;
  bool packed6;                   // VQ4P: 3-byte runs of four 6-bit indices
};

struct KernelTable {
  const char* isa;  // "generic", "avx2", "avx512", "avx512vbmi", "neon"

  // y[r] = sum_c W[r][c] * x[c] for r in [row_begin, row_end). Per group of 128 a partial
  // sum in f32, then acc += fp16(scale) * partial (the v0 summation order).
  void (*matvec)(const QuantMatrix& w, const float* x, float* y, std::int64_t row_begin,
                 std::int64_t row_end);
  // matvec for n tokens: y_t[r] = sum_c W[r][c] * x_t[c] with x_t = x + t*x_stride, y_t = y +
  // t*y_stride, rows [row_begin, row_end). Each weight is decoded once per tile of tokens (what
  // makes chunked prefill cheaper than token by token). Contract: within one table, token t's
  // results are bit-identical to that table's matvec on x_t, for any n and row range.
  void (*matmul)(const QuantMatrix& w, const float* x, std::int64_t x_stride, int n, float* y,
                 std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end);

  // lut[v][s][e] = sum_{d<vec_dim} x[v*vec_dim+d] * book_s[e][d], d ascending, for vectors
  // [v_begin, v_end). books[s] points at stage s's entries x vec_dim f32 centroids.
  void (*rvq_lut_build)(const float* x, const float* const* books, int stages, int entries,
                        int vec_dim, int v_begin, int v_end, float* lut);

  // VQ4P int8 LUT quantisation in blocks of 32 vectors (scale per block, §2 of the notes).
  void (*rvq_lut_quantize)(const float* lut, int n_vectors, int stages, int entries,
                           std::int8_t* lut_q, float* block_scales);

  // y[r] = fp16(scale_r) * sum_v sum_s lut[v][s][idx(r,v,s)], rows [row_begin,row_end),
  // row_begin a multiple of 64. 8-bit indices with an f32 LUT.
  void (*rvq_apply)(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin,
                    int row_end);
  // VQ4P with the int8 LUT: int16 sums per 32-vector block, acc += block_scale * sum.
  void (*rvq_apply_vq4p)(const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales,
                         float* y, int row_begin, int row_end);
  // rvq_apply_vq4p for n tokens against one matrix: token t's LUT (lut_q[t], block_scales[t])
  // into y[t], rows [row_begin, row_end). Contract: token t's results bit-identical to
  // rvq_apply_vq4p's. nullptr where a table has no kernel that reads the index once for several
  // tokens (callers then loop over rvq_apply_vq4p: rvq_apply_vq4p_each).
  void (*rvq_apply_vq4p_tokens)(const RvqMatrix& m, int n, const std::int8_t* const* lut_q,
                                const float* const* block_scales, float* const* y, int row_begin,
                                int row_end) = nullptr;
  // The 8-bit-index LUT as int16 tables, in place, vector positions [v_begin, v_end) (the `q16`
  // LUT mode, compute/forward/lut_mode.hpp): slot v of the f32 LUT (stages x entries floats)
  // becomes its stages x entries int16 entries q = nearbyint(lut * (kLutQ16Range / total)) at the
  // slot's start and the f32 scale total / kLutQ16Range right after them (float offset
  // stages * entries / 2), where total = sum over stages of max |lut| in that slot, stages
  // ascending; a slot that is all zeros gets q = 0, scale 0. Any stage sum of a slot's entries
  // therefore fits int16. Bit-identical across ISAs (max and the multiply are exact per lane).
  void (*rvq_lut_to_q16)(float* lut, int stages, int entries, int v_begin, int v_end);
  // rvq_apply on int16 slots: per row and position the stage entries summed as integers (exact),
  // then acc += scale_v * float(sum) (mul then add), v ascending; y[r] = acc * fp16(scale_r).
  // Bit-identical across ISAs.
  void (*rvq_apply_q16)(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin,
                        int row_end);
  // Prefill's matrix product (compute/forward/expert_batch.cpp): y_t[r] = fp16(scale_r) * sum_c
  // W[r][c] x_t[c] for n tokens (x_t = x + t*x_stride, y_t = y + t*y_stride), rows [row_begin,
  // row_end) (any range), with W decoded from the indices as it is used, never stored:
  // W[r][v*vec_dim + d] = sum_s books[s][idx(r,v,s)*vec_dim + d], stages left to right. Order per
  // (row, token): 8 lanes, lane l = fma(W[r][c], x_t[c], lane l) over c = l mod 8 ascending, then
  // ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), times the scale: every ISA bit-identical to generic
  // for any n, tile shape or row split. 8-bit and packed 6-bit (VQ4P) indices.
  void (*rvq_matmul)(const RvqMatrix& m, const float* const* books, int vec_dim, const float* x,
                     std::int64_t x_stride, int n, float* y, std::int64_t y_stride, int row_begin,
                     int row_end);

  // One KDA recurrent step for one head (waste-v0-reference.md §3.4 step 4), K = V = D:
  //   S[i][:] *= exp(g[i]);  u = S^T k;  S += k (beta (v - u))^T;  o = S^T q
  // S is D x D row-major (row = key dim), updated in place; q and k already L2-normalised (and
  // q scaled by D^-1/2) by the caller. D <= kKdaMaxDim. ISAs other than generic may use FMA
  // (results agree with generic to ~1e-6 relative, not bit for bit).
  void (*kda_head_step)(float* S, const float* q, const float* k, const float* v, const float* g,
                        float beta, int D, float* o);

  // rvq_apply_vq4p looks its 64-entry stage tables up from registers (avx2: four vpshufb a stage,
  // avx512: vpermt2w, avx512vbmi: vpermb), several times the VQ3R apply's rate; elsewhere (generic,
  // neon) VQ3R is the faster format (docs/PERFORMANCE.md). What the converter's default expert
  // format follows.
  bool vq4p_from_registers = false;

  // MLA's absorbed query (compute/forward/mla.cpp) and the like: rows [row0, row0 + n_rows) of a
  // trunk matrix weighted by x and added into y, per token: for i ascending and every column j,
  // y_t[j] = y_t[j] + x_t[i] * W[row0 + i][j] with x_t = x + t*x_stride, y_t = y + t*y_stride and
  // W dequantised exactly (f32 as stored, else q * fp16(scale)). Vector kernels take Q4G and Q8G.
  // The dequantised weight is exact in f32, then one rounded product and one rounded sum (no FMA):
  // every ISA gives generic's bits (`weighted_rows_reference`). nullptr where a table has no
  // vector kernel; `weighted_rows` then runs the reference.
  void (*weighted_rows)(const QuantMatrix& w, std::int64_t row0, int n_rows, const float* x, std::int64_t x_stride,
                        int n, float* y, std::int64_t y_stride) = nullptr;

  // Sampling's weights over a vocabulary row: y[i] = std::exp((x[i] - sub) / div) for i < n, the
  // subtraction and division in float, the C library's expf bit for bit. nullptr where a table has
  // no vector kernel, or where the running C library's expf is not the one the kernel repeats
  // (avx2_exp.cpp and avx512_exp.cpp check at start-up); `exp_weights` then runs the reference.
  void (*exp_weights)(const float* x, int n, float sub, float div, float* y) = nullptr;
  // A logprob's normaliser: the sum over i < n of exp(double(x[i]) - sub), in double. Not bitwise:
  // within 1e-14 relative of `sum_exp_reference` (std::exp, summed in order) for x[i] - sub <= 0.
  // nullptr: the reference.
  double (*sum_exp)(const float* x, std::int64_t n, double sub) = nullptr;
};

inline constexpr int kKdaMaxDim = 1024;        // kda_head_step keeps D floats on the stack
inline constexpr int kLutQuantBlock = 32;      // VQ4P: vector positions per int8 LUT scale
// q16 LUT slots: the stage sum of one row's entries is at most this (+ stages/2 from rounding),
// below int16's limit.
inline constexpr float kLutQ16Range = 32000.0f;
inline constexpr int kLutQ16MaxSlot = 4 * 256;  // stages x entries of a q16 slot at most

// table.rvq_apply_vq4p_tokens where the table has one, else rvq_apply_vq4p token by token.
void rvq_apply_vq4p_each(const KernelTable& table, const RvqMatrix& m, int n, const std::int8_t* const* lut_q,
                         const float* const* block_scales, float* const* y, int row_begin, int row_end);

// table.weighted_rows where the table has one and w is one it takes (Q4G or Q8G, groups and
// columns multiples of 64), else the scalar reference below (every trunk format).
void weighted_rows(const KernelTable& table, const QuantMatrix& w, std::int64_t row0, int n_rows, const float* x,
                   std::int64_t x_stride, int n, float* y, std::int64_t y_stride);
void weighted_rows_reference(const QuantMatrix& w, std::int64_t row0, int n_rows, const float* x,
                             std::int64_t x_stride, int n, float* y, std::int64_t y_stride);

// Sampling's weights and a logprob's normaliser (the entries above): the table's vector kernel
// where it has one, else the references below.
void exp_weights(const KernelTable& table, const float* x, int n, float sub, float div, float* y);
void exp_weights_reference(const float* x, int n, float sub, float div, float* y);
double sum_exp(const KernelTable& table, const float* x, std::int64_t n, double sub);
double sum_exp_reference(const float* x, std::int64_t n, double sub);

// Number of VQ4P LUT blocks (size of block_scales) for n_vectors positions.
constexpr int lut_quant_blocks(int n_vectors) {
  return (n_vectors + kLutQuantBlock - 1) / kLutQuantBlock;
}

// The table chosen at start-up for this CPU (logged once).
const KernelTable& active();
// The scalar reference, always available (tests compare every ISA against it).
const KernelTable& generic();
// Every table this CPU can run, generic first (tests and benches loop over these).
std::span<const KernelTable* const> supported();
// The supported table named isa ("generic", "avx2", "avx512", "avx512vbmi"), or nullptr.
const KernelTable* find(std::string_view isa);
// Whether table's rvq_apply_q16 is its own vector kernel rather than generic's scalar loop (today:
// the avx512vbmi table's vpermt2w lookup). The q16 LUT mode pays only with one: it is the default
// LUT mode exactly when the active table reports one (compute/forward/lut_mode.hpp).
bool has_vector_q16_apply(const KernelTable& table);

}  // namespace waste::kernels

// Residual vector quantisation of expert matrices (reference §8): codebooks fitted per layer and
// matrix kind by residual k-means in the row-normalised domain, then greedy residual encoding.
// Deterministic by construction: a counter-based generator, work split into fixed chunks whose
// partial sums are reduced in chunk order, so the bytes never depend on the thread count.
// Vectors are 8 floats (vec_dim 8, the only value v0 containers use).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compute/runtime/thread_pool.hpp"

namespace waste::convert {

inline constexpr int kVecDim = 8;

// Nearest centroid to x[0..8) by squared L2, summed over d ascending with no fused multiply-add;
// the first minimum wins. `book_t` is the codebook transposed: [d][entries]; entries % 8 == 0
// for the SIMD path (it falls back to the scalar one otherwise). Both paths return identical
// results (tested): each lane computes the scalar expression for its centroid.
int nearest_scalar(const float* x, const float* book_t, int entries) noexcept;
int nearest_simd(const float* x, const float* book_t, int entries) noexcept;  // AVX2 when present
bool simd_available() noexcept;

// splitmix64-based generator (stable across platforms and library versions, unlike <random>'s
// distributions).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() noexcept;
  std::uint64_t below(std::uint64_t n) noexcept { return n ? next() % n : 0; }
  // In-place Fisher-Yates of [0, n) into `out`.
  void permutation(std::uint32_t n, std::vector<std::uint32_t>& out);

 private:
  std::uint64_t state_;
};

struct RvqParams {
  int stages = 3;
  int entries = 256;
  int iterations = 10;              // Lloyd iterations per stage
  int train_vectors = 300000;       // cap on the training set
  int sample_experts = 12;          // experts sampled per (layer, kind)
};

// Books of one (layer, kind): stages x entries x 8 fp16 values, and their f32 decode with the
// engine's subnormal-flushing codebook decode (what encoding and reconstruction use).
struct RvqBooks {
  int stages = 0, entries = 0;
  std::vector<std::uint16_t> fp16;  // [stage][entry][d]
  std::vector<float> value;         // same layout, decoded
  std::vector<float> transposed;    // [stage][d][entry], for the nearest search
  void set_stage(int stage, std::span<const float> centroids);  // rounds to fp16
};

// Residual k-means on `vectors` (n x 8, consumed: left holding the final residuals).
RvqBooks train_rvq(std::vector<float>& vectors, const RvqParams& params, ThreadPool& pool);

// Greedy residual encode of one row-normalised 8-vector; writes `stages` indices.
void encode_vector(const RvqBooks& books, const float* x, std::uint8_t* indices_out, bool simd) noexcept;

}  // namespace waste::convert

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

// Nearest centroid by d(c) = |c|^2 - 2 x.c (the |x|^2 term is the same for every c), with the
// dot product as one mul then fused multiply-adds over d ascending and d = fma(-2, dot, |c|^2);
// the first minimum wins. `book` is [entries][8] row-major, `norms` its |c|^2. The scalar
// reference (std::fma) and the AVX2+FMA path (8 points per register, one centroid at a time,
// a strict compare per lane) compute the same correctly rounded operations in the same order,
// so they return identical indices (tested).
int nearest_scalar(const float* x, const float* book, const float* norms, int entries) noexcept;
// Nearest for n points (n x 8 floats) into out[0..n).
void nearest_many(const float* xs, std::int64_t n, const float* book, const float* norms, int entries,
                  std::int32_t* out, bool simd) noexcept;
bool simd_available() noexcept;
// |c|^2 of each centroid, summed as the dot product is (mul, then fma over d).
void centroid_norms(const float* book, int entries, float* norms) noexcept;

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
  bool simd = true;                 // false: the scalar reference search (tests)
};

// Books of one (layer, kind): stages x entries x 8 fp16 values, and their f32 decode with the
// engine's subnormal-flushing codebook decode (what encoding and reconstruction use).
struct RvqBooks {
  int stages = 0, entries = 0;
  std::vector<std::uint16_t> fp16;  // [stage][entry][d]
  std::vector<float> value;         // same layout, decoded
  std::vector<float> norms;         // [stage][entry] |c|^2 of the decoded centroids
  void set_stage(int stage, std::span<const float> centroids);  // rounds to fp16
};

// Residual k-means on `vectors` (n x 8, consumed: left holding the final residuals).
RvqBooks train_rvq(std::vector<float>& vectors, const RvqParams& params, ThreadPool& pool);

// Greedy residual encode of n row-normalised 8-vectors: out[i * stages + s] = stage s of vector i.
// `scratch` is resized to hold the residuals and indices.
void encode_vectors(const RvqBooks& books, const float* xs, std::int64_t n, std::uint8_t* out, bool simd,
                    std::vector<float>& scratch);

}  // namespace waste::convert

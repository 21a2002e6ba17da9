// Expert matrices to v0 record bytes: per row, scale = max|W_r| (>= 1e-8, stored fp16), the row
// divided by the f32 scale, each 8-vector greedily encoded against the layer's books, indices
// written in the blocked layout ([row_block][v][row_in_block][stage], or 4x6-bit runs for VQ4P).
// Also the training-set sampler of reference §8 (12 experts, ~300 000 row-normalised vectors).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compute/convert/rvq.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "shared/container/expert_record.hpp"

namespace waste::convert {

struct ErrorSums {
  double err2 = 0.0;   // sum of (w - w_reconstructed)^2
  double norm2 = 0.0;  // sum of w^2
  void add(const ErrorSums& o) { err2 += o.err2; norm2 += o.norm2; }
  [[nodiscard]] double relative() const;  // sqrt(err2 / norm2)
};

// Row-normalise a rows x cols matrix in place; returns the f32 row scales.
std::vector<float> normalize_rows(std::span<float> w, std::int64_t rows, std::int64_t cols);

// Append up to `per_expert` 8-vectors of a row-normalised matrix, chosen by a generator seeded
// with `seed` (without replacement), to `out`.
void sample_vectors(std::span<const float> normalized, std::uint64_t seed, std::int64_t per_expert, std::vector<float>& out);

// Shuffle (seed 0) and keep at most `cap` vectors.
void cap_training_set(std::vector<float>& vectors, std::int64_t cap);

// The sampled expert ids for `n_experts`: range(0, E, max(1, E / n))[:n].
std::vector<int> sampled_experts(int n_experts, int n);

// Encode `w` (original values, rows x cols) of `kind` into `record`; adds the reconstruction
// error (of fp16 scale x sum of fp16-decoded centroids, what the engine computes) to `sums`.
void encode_matrix(const RvqBooks& books, std::span<const float> w, const ExpertGeometry& g, MatrixKind kind,
                   std::span<std::byte> record, ErrorSums& sums, ThreadPool& pool, bool simd);

}  // namespace waste::convert

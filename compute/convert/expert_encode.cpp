#include "compute/convert/expert_encode.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "shared/fp16.hpp"

namespace waste::convert {

double ErrorSums::relative() const { return norm2 > 0 ? std::sqrt(err2 / norm2) : 0.0; }

std::vector<float> normalize_rows(std::span<float> w, std::int64_t rows, std::int64_t cols) {
  std::vector<float> scales(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = &w[std::size_t(r * cols)];
    float amax = 0.0f;
    for (std::int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
    const float s = std::max(amax, 1e-8f);
    scales[std::size_t(r)] = s;
    for (std::int64_t c = 0; c < cols; ++c) row[c] /= s;
  }
  return scales;
}

void sample_vectors(std::span<const float> x, std::uint64_t seed, std::int64_t per_expert, std::vector<float>& out) {
  const auto n = std::uint32_t(x.size() / kVecDim);
  Rng rng(seed);
  std::vector<std::uint32_t> perm;
  rng.permutation(n, perm);
  const std::int64_t take = std::min<std::int64_t>(per_expert, n);
  for (std::int64_t i = 0; i < take; ++i) {
    const float* v = &x[std::size_t(perm[std::size_t(i)]) * kVecDim];
    out.insert(out.end(), v, v + kVecDim);
  }
}

void cap_training_set(std::vector<float>& v, std::int64_t cap) {
  const auto n = std::uint32_t(v.size() / kVecDim);
  Rng rng(0);
  std::vector<std::uint32_t> perm;
  rng.permutation(n, perm);
  const std::int64_t keep = std::min<std::int64_t>(cap, n);
  std::vector<float> out(std::size_t(keep) * kVecDim);
  for (std::int64_t i = 0; i < keep; ++i) {
    std::memcpy(&out[std::size_t(i) * kVecDim], &v[std::size_t(perm[std::size_t(i)]) * kVecDim], kVecDim * sizeof(float));
  }
  v = std::move(out);
}

std::vector<int> sampled_experts(int n_experts, int n) {
  std::vector<int> ids;
  const int step = std::max(1, n_experts / std::max(1, n));
  for (int e = 0; e < n_experts && int(ids.size()) < n; e += step) ids.push_back(e);
  return ids;
}

void encode_matrix(const RvqBooks& books, std::span<const float> w, const ExpertGeometry& g, MatrixKind kind,
                   std::span<std::byte> record, ErrorSums& sums, ThreadPool& pool, bool simd) {
  const int k = int(kind);
  const int rows = g.rows[k], cols = g.cols[k];
  const int nvr = cols / kVecDim;
  const int bpr = g.bytes_per_run();
  auto* idx_base = reinterpret_cast<std::uint8_t*>(record.data()) + g.offset_of(kind);
  auto* scale_base = reinterpret_cast<std::uint8_t*>(record.data()) + g.scales_offset(kind);
  const std::size_t per = std::size_t(books.entries) * kVecDim;
  std::vector<ErrorSums> row_sums(static_cast<std::size_t>(rows));
  // One 64-row block per task: blocks own disjoint index bytes, so any split writes the same bytes.
  const std::int64_t n_blocks = (rows + kIndexBlockRows - 1) / kIndexBlockRows;
  pool.parallel_for(n_blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    std::vector<float> x(static_cast<std::size_t>(cols));
    std::vector<std::uint8_t> row_ids(std::size_t(nvr) * std::size_t(books.stages));
    std::vector<float> scratch;
    for (std::int64_t b = b0; b < b1; ++b) {
      for (int r = int(b) * kIndexBlockRows; r < std::min<int>(rows, int(b + 1) * kIndexBlockRows); ++r) {
        const float* wr = &w[std::size_t(r) * cols];
        float amax = 0.0f;
        for (int c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(wr[c]));
        const float s = std::max(amax, 1e-8f);
        for (int c = 0; c < cols; ++c) x[std::size_t(c)] = wr[c] / s;
        const std::uint16_t s16 = f32_to_fp16(s);
        std::memcpy(scale_base + 2 * std::size_t(r), &s16, 2);
        const float s_dec = fp16_to_f32(s16);
        ErrorSums es;
        encode_vectors(books, x.data(), nvr, row_ids.data(), simd, scratch);
        for (int v = 0; v < nvr; ++v) {
          const std::uint8_t* ids = &row_ids[std::size_t(v) * books.stages];
          std::uint8_t* run = idx_base + (std::uint64_t(r / kIndexBlockRows) * nvr + v) * kIndexBlockRows * bpr +
                              std::uint64_t(r % kIndexBlockRows) * bpr;
          if (g.packed6) {
            run[0] = std::uint8_t(ids[0] | (ids[1] << 6));
            run[1] = std::uint8_t((ids[1] >> 2) | (ids[2] << 4));
            run[2] = std::uint8_t((ids[2] >> 4) | (ids[3] << 2));
          } else {
            std::memcpy(run, ids, std::size_t(books.stages));
          }
          for (int d = 0; d < kVecDim; ++d) {
            float sum = 0.0f;
            for (int st = 0; st < books.stages; ++st) sum += books.value[st * per + std::size_t(ids[st]) * kVecDim + d];
            const double orig = wr[v * kVecDim + d];
            const double diff = orig - double(s_dec) * double(sum);
            es.err2 += diff * diff;
            es.norm2 += orig * orig;
          }
        }
        row_sums[std::size_t(r)] = es;
      }
    }
  });
  for (const auto& rs : row_sums) sums.add(rs);  // row order: deterministic
}

}  // namespace waste::convert

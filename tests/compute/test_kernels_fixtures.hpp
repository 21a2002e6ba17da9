// Test data for the kernel tests: quantised trunk matrices and RVQ expert matrices built from
// random weights exactly as waste-v0-reference.md §1.5 / §1.7 lay them out, plus the dequantised
// weights the references multiply with.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "compute/kernels/kernels.hpp"
#include "shared/fp16.hpp"

namespace waste::test {

inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

// A trunk matrix in one of the v0 formats with its dequantised weights.
struct TrunkMatrix {
  std::vector<std::uint8_t> payload;
  std::vector<std::uint16_t> scales;
  std::vector<float> dequant;  // rows x cols, what the kernel must multiply by
  kernels::QuantMatrix view{};
};

inline TrunkMatrix make_trunk_matrix(std::uint8_t fmt, std::int64_t rows, std::int64_t cols,
                                     std::uint32_t seed, int group = 128) {
  const int kGroup = group;
  TrunkMatrix m;
  const std::vector<float> w = random_floats(static_cast<std::size_t>(rows * cols), seed);
  const std::int64_t n_groups = (cols + kGroup - 1) / kGroup;
  const std::int64_t padded = n_groups * kGroup;
  std::int64_t stride = 0;
  int qmax = 0;
  switch (fmt) {
    case 0: stride = cols * 4; break;
    case 2: stride = padded; qmax = 127; break;
    case 3: stride = padded / 2; qmax = 7; break;
    case 7: stride = (padded * 3 + 7) / 8 + 1; qmax = 3; break;
  }
  m.payload.assign(static_cast<std::size_t>(rows * stride), 0);
  m.dequant.assign(static_cast<std::size_t>(rows * cols), 0.0f);
  if (fmt == 0) {
    std::memcpy(m.payload.data(), w.data(), w.size() * 4);
    m.dequant = w;
  } else {
    m.scales.assign(static_cast<std::size_t>(rows * n_groups), 0);
    for (std::int64_t r = 0; r < rows; ++r) {
      std::uint8_t* row = m.payload.data() + r * stride;
      for (std::int64_t g = 0; g < n_groups; ++g) {
        const std::int64_t begin = g * kGroup;
        const std::int64_t end = std::min<std::int64_t>(begin + kGroup, cols);
        float amax = 1e-8f;
        for (std::int64_t c = begin; c < end; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
        const float s = amax / static_cast<float>(qmax);
        const std::uint16_t s16 = f32_to_fp16(s);
        m.scales[r * n_groups + g] = s16;
        for (std::int64_t c = begin; c < end; ++c) {
          const int q = std::clamp(static_cast<int>(std::nearbyint(w[r * cols + c] / s)),
                                   fmt == 2 ? -127 : -qmax - 1, qmax);
          m.dequant[r * cols + c] = static_cast<float>(q) * fp16_to_f32(s16);
          if (fmt == 2) {
            row[c] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
          } else if (fmt == 3) {
            const unsigned nibble = static_cast<unsigned>(q + 8);
            row[c / 2] |= static_cast<std::uint8_t>((c % 2) ? nibble << 4 : nibble);
          } else {
            const unsigned u = static_cast<unsigned>(q + 4);
            const std::int64_t bit = 3 * c;
            row[bit / 8] |= static_cast<std::uint8_t>(u << (bit % 8));
            if (bit % 8 > 5) row[bit / 8 + 1] |= static_cast<std::uint8_t>(u >> (8 - bit % 8));
          }
        }
      }
    }
  }
  m.view = kernels::QuantMatrix{m.payload.data(), m.scales.empty() ? nullptr : m.scales.data(),
                                rows, cols, stride, kGroup, fmt};
  return m;
}

// An RVQ expert matrix: codebooks, blocked indices, row scales and the expanded W.
struct ExpertMatrix {
  int rows = 0, cols = 0, stages = 0, entries = 0;
  bool packed6 = false;
  std::vector<std::vector<float>> books;       // [stage][entry * 8 + d]
  std::vector<const float*> book_ptrs;
  std::vector<std::vector<int>> idx;           // [row * n_vectors + v][stage]
  std::vector<std::uint8_t> index;             // on-disk layout
  std::vector<std::uint8_t> scale_bytes;       // fp16 row scales at an odd address (+1)
  std::vector<float> w;                        // rows x cols expanded weights
  kernels::RvqMatrix view{};
};

inline ExpertMatrix make_expert_matrix(int rows, int cols, int stages, bool packed6,
                                       std::uint32_t seed) {
  constexpr int kVecDim = 8;
  constexpr int kBlock = 64;
  ExpertMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.stages = stages;
  m.packed6 = packed6;
  m.entries = packed6 ? 64 : 256;
  const int n_vectors = cols / kVecDim;
  const int n_blocks = (rows + kBlock - 1) / kBlock;
  std::mt19937 rng(seed);
  for (int s = 0; s < stages; ++s) {
    m.books.push_back(random_floats(static_cast<std::size_t>(m.entries * kVecDim), seed + 17 + s,
                                    -0.5f, 0.5f));
  }
  for (const auto& b : m.books) m.book_ptrs.push_back(b.data());
  std::uniform_int_distribution<int> pick(0, m.entries - 1);
  const int run = packed6 ? 3 : stages;
  m.index.assign(static_cast<std::size_t>(n_blocks) * n_vectors * kBlock * run, 0);
  m.idx.assign(static_cast<std::size_t>(rows) * n_vectors, std::vector<int>(stages));
  for (int r = 0; r < rows; ++r) {
    for (int v = 0; v < n_vectors; ++v) {
      std::vector<int>& ids = m.idx[static_cast<std::size_t>(r) * n_vectors + v];
      for (int& id : ids) id = pick(rng);
      std::uint8_t* out = m.index.data() +
                          (static_cast<std::size_t>(r / kBlock) * n_vectors + v) * kBlock * run +
                          static_cast<std::size_t>(r % kBlock) * run;
      if (packed6) {
        out[0] = static_cast<std::uint8_t>(ids[0] | (ids[1] << 6));
        out[1] = static_cast<std::uint8_t>((ids[1] >> 2) | (ids[2] << 4));
        out[2] = static_cast<std::uint8_t>((ids[2] >> 4) | (ids[3] << 2));
      } else {
        for (int s = 0; s < stages; ++s) out[s] = static_cast<std::uint8_t>(ids[s]);
      }
    }
  }
  // Padding rows of the last block get non-zero junk: the kernels must not write those rows.
  m.scale_bytes.assign(1 + 2 * static_cast<std::size_t>(rows), 0);
  std::vector<float> row_scale(static_cast<std::size_t>(rows));
  std::uniform_real_distribution<float> scale_dist(0.25f, 2.0f);
  for (int r = 0; r < rows; ++r) {
    const std::uint16_t h = f32_to_fp16(scale_dist(rng));
    std::memcpy(m.scale_bytes.data() + 1 + 2 * r, &h, 2);
    row_scale[r] = fp16_to_f32(h);
  }
  m.w.assign(static_cast<std::size_t>(rows) * cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    for (int v = 0; v < n_vectors; ++v) {
      const std::vector<int>& ids = m.idx[static_cast<std::size_t>(r) * n_vectors + v];
      for (int d = 0; d < kVecDim; ++d) {
        double sum = 0;
        for (int s = 0; s < stages; ++s) sum += m.books[s][ids[s] * kVecDim + d];
        m.w[static_cast<std::size_t>(r) * cols + v * kVecDim + d] =
            static_cast<float>(row_scale[r] * sum);
      }
    }
  }
  m.view = kernels::RvqMatrix{
      m.index.data(), reinterpret_cast<const std::uint16_t*>(m.scale_bytes.data() + 1), rows,
      n_vectors, stages, packed6};
  return m;
}

// y = W x in double, and the scale a relative tolerance should use: sum |W||x| per row.
struct Reference {
  std::vector<double> y;
  std::vector<double> magnitude;
};

inline Reference reference_matvec(const std::vector<float>& w, std::int64_t rows, std::int64_t cols,
                                  const std::vector<float>& x) {
  Reference ref{std::vector<double>(rows), std::vector<double>(rows)};
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      ref.y[r] += static_cast<double>(w[r * cols + c]) * x[c];
      ref.magnitude[r] += std::fabs(static_cast<double>(w[r * cols + c]) * x[c]);
    }
  }
  return ref;
}

}  // namespace waste::test

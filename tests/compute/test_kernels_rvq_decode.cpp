// rvq_decode (prefill's matrix-product path): every ISA gives generic's bits on odd shapes, row
// ranges that start and end anywhere, 1-4 stages and VQ4P; generic's values are the stage
// centroids summed left to right, and times the row scale they are the expanded weights.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "compute/kernels/kernels.hpp"
#include "shared/fp16.hpp"
#include "test_kernels_fixtures.hpp"

namespace {

using waste::kernels::generic;
using waste::kernels::KernelTable;
using waste::test::ExpertMatrix;
using waste::test::make_expert_matrix;

constexpr float kGuard = -12345.0f;

float row_scale(const ExpertMatrix& m, int r) {
  std::uint16_t h;
  std::memcpy(&h, m.scale_bytes.data() + 1 + 2 * r, 2);
  return waste::fp16_to_f32(h);
}

}  // namespace

TEST_CASE("generic rvq_decode sums the stage centroids left to right, and times the row scale is W",
          "[compute][kernels]") {
  for (const bool packed6 : {false, true}) {
    const int stages = packed6 ? 4 : 3;
    const ExpertMatrix m = make_expert_matrix(130, 48, stages, packed6, 900 + int(packed6));
    const int n_vectors = m.view.n_vectors;
    std::vector<float> w(std::size_t(m.rows) * m.cols);
    generic().rvq_decode(m.view, m.book_ptrs.data(), 8, 0, m.rows, w.data());
    for (int r = 0; r < m.rows; ++r) {
      for (int v = 0; v < n_vectors; ++v) {
        const std::vector<int>& ids = m.idx[std::size_t(r) * n_vectors + v];
        for (int d = 0; d < 8; ++d) {
          float sum = m.books[0][ids[0] * 8 + d];
          float magnitude = std::fabs(sum);
          for (int s = 1; s < stages; ++s) {
            const float term = m.books[std::size_t(s)][ids[std::size_t(s)] * 8 + d];
            sum += term;
            magnitude += std::fabs(term);
          }
          const std::size_t at = std::size_t(r) * m.cols + v * 8 + d;
          INFO("packed6 " << packed6 << " row " << r << " col " << v * 8 + d);
          REQUIRE(std::memcmp(&w[at], &sum, sizeof(float)) == 0);
          const float scale = row_scale(m, r);
          REQUIRE(std::fabs(w[at] * scale - m.w[at]) <= 1e-6f * magnitude * std::fabs(scale));
        }
      }
    }
  }
}

TEST_CASE("every ISA's rvq_decode is bit-identical to generic on odd shapes and row ranges",
          "[compute][kernels]") {
  struct Shape { int rows, cols, stages; bool packed6; };
  for (const Shape shape : {Shape{1, 24, 3, false}, Shape{17, 40, 3, false}, Shape{63, 8, 1, false},
                            Shape{129, 56, 2, false}, Shape{200, 72, 4, false}, Shape{70, 64, 4, true},
                            Shape{131, 24, 4, true}}) {
    const ExpertMatrix m = make_expert_matrix(shape.rows, shape.cols, shape.stages, shape.packed6, 910 + shape.rows);
    std::vector<float> expected(std::size_t(shape.rows) * shape.cols);
    generic().rvq_decode(m.view, m.book_ptrs.data(), 8, 0, shape.rows, expected.data());
    for (const KernelTable* k : waste::kernels::supported()) {
      for (const auto& [begin, end] : {std::pair{0, shape.rows}, std::pair{shape.rows / 3, shape.rows},
                                       std::pair{shape.rows / 2, shape.rows / 2 + 1},
                                       std::pair{std::min(60, shape.rows - 1), std::min(shape.rows, 70)}}) {
        INFO("isa " << k->isa << " rows " << shape.rows << " stages " << shape.stages << " packed6 " << shape.packed6
                    << " range [" << begin << ", " << end << ")");
        const std::size_t n = std::size_t(end - begin) * shape.cols;
        std::vector<float> actual(n + 16, kGuard);
        k->rvq_decode(m.view, m.book_ptrs.data(), 8, begin, end, actual.data());
        REQUIRE(std::memcmp(actual.data(), expected.data() + std::size_t(begin) * shape.cols, n * sizeof(float)) == 0);
        for (std::size_t i = n; i < actual.size(); ++i) REQUIRE(actual[i] == kGuard);
      }
    }
  }
}

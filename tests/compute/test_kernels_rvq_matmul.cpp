// rvq_matmul (prefill's matrix products): generic against a double-precision product with the
// expanded weights (within 1e-6 of sum |w x| per row), and every ISA bit-identical to generic for
// 1-4 stages, VQ4P, token counts around the 4-token tile, odd row ranges, and rows outside the
// range untouched.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "compute/kernels/kernels.hpp"
#include "test_kernels_fixtures.hpp"

namespace {

using waste::kernels::generic;
using waste::kernels::KernelTable;
using waste::test::ExpertMatrix;
using waste::test::make_expert_matrix;
using waste::test::random_floats;

constexpr float kUntouched = -12345.0f;

}  // namespace

TEST_CASE("generic rvq_matmul equals W x_t with the expanded weights, within 1e-6 of sum |w x|",
          "[compute][kernels]") {
  for (const bool packed6 : {false, true}) {
    const int stages = packed6 ? 4 : 3;
    const ExpertMatrix m = make_expert_matrix(130, 48, stages, packed6, 930 + int(packed6));
    const int n = 3;
    const std::vector<float> x = random_floats(std::size_t(n) * m.cols, 931);
    std::vector<float> y(std::size_t(n) * m.rows, kUntouched);
    generic().rvq_matmul(m.view, m.book_ptrs.data(), 8, x.data(), m.cols, n, y.data(), m.rows, 0, m.rows);
    for (int t = 0; t < n; ++t) {
      const std::vector<float> xt(x.begin() + std::ptrdiff_t(t) * m.cols, x.begin() + std::ptrdiff_t(t + 1) * m.cols);
      const auto ref = waste::test::reference_matvec(m.w, m.rows, m.cols, xt);
      for (int r = 0; r < m.rows; ++r) {
        INFO("packed6 " << packed6 << " token " << t << " row " << r);
        REQUIRE(std::fabs(double(y[std::size_t(t) * m.rows + r]) - ref.y[std::size_t(r)]) <=
                1e-6 * ref.magnitude[std::size_t(r)]);
      }
    }
  }
}

TEST_CASE("every ISA's rvq_matmul is bit-identical to generic for any token count and row range",
          "[compute][kernels]") {
  struct Shape { int rows, cols, stages; bool packed6; };
  for (const Shape shape : {Shape{1, 24, 3, false}, Shape{17, 40, 3, false}, Shape{63, 8, 1, false},
                            Shape{129, 56, 2, false}, Shape{133, 72, 4, false}, Shape{70, 64, 4, true},
                            Shape{131, 24, 4, true}}) {
    const ExpertMatrix m = make_expert_matrix(shape.rows, shape.cols, shape.stages, shape.packed6, 940 + shape.rows);
    for (const int n : {1, 2, 3, 4, 5, 7, 8, 9, 17}) {
      const std::vector<float> x = random_floats(std::size_t(n) * (shape.cols + 5), 941 + n);
      const std::int64_t x_stride = shape.cols + 5, y_stride = shape.rows + 3;
      std::vector<float> expected(std::size_t(n) * y_stride, kUntouched);
      generic().rvq_matmul(m.view, m.book_ptrs.data(), 8, x.data(), x_stride, n, expected.data(), y_stride, 0,
                           shape.rows);
      for (const KernelTable* k : waste::kernels::supported()) {
        for (const auto& [begin, end] : {std::pair{0, shape.rows}, std::pair{shape.rows / 3, shape.rows},
                                         std::pair{shape.rows / 2, shape.rows / 2 + 1},
                                         std::pair{std::min(61, shape.rows - 1), std::min(shape.rows, 70)}}) {
          INFO("isa " << k->isa << " rows " << shape.rows << " stages " << shape.stages << " packed6 "
                      << shape.packed6 << " tokens " << n << " range [" << begin << ", " << end << ")");
          std::vector<float> actual(std::size_t(n) * y_stride, kUntouched);
          k->rvq_matmul(m.view, m.book_ptrs.data(), 8, x.data(), x_stride, n, actual.data(), y_stride, begin, end);
          for (int t = 0; t < n; ++t) {
            for (int r = 0; r < y_stride; ++r) {
              const std::size_t at = std::size_t(t) * y_stride + r;
              if (r >= begin && r < end) {
                REQUIRE(std::memcmp(&actual[at], &expected[at], sizeof(float)) == 0);
              } else {
                REQUIRE(actual[at] == kUntouched);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("every ISA's rvq_matmul is bit-identical to generic with 16-dimensional vectors", "[compute][kernels]") {
  // The 8-dimensional fixture's index bytes read as 16-dimensional positions (half as many per
  // row), with books of 16-float centroids: the path for vec_dim other than 8.
  const ExpertMatrix m = make_expert_matrix(70, 64, 3, false, 960);
  waste::kernels::RvqMatrix view = m.view;
  view.n_vectors = m.cols / 16;
  std::vector<std::vector<float>> books;
  std::vector<const float*> ptrs;
  for (int s = 0; s < 3; ++s) books.push_back(random_floats(256 * 16, 961 + s, -0.5f, 0.5f));
  for (const auto& b : books) ptrs.push_back(b.data());
  const int n = 5;
  const std::vector<float> x = random_floats(std::size_t(n) * m.cols, 964);
  std::vector<float> expected(std::size_t(n) * m.rows);
  generic().rvq_matmul(view, ptrs.data(), 16, x.data(), m.cols, n, expected.data(), m.rows, 0, m.rows);
  for (const KernelTable* k : waste::kernels::supported()) {
    INFO("isa " << k->isa);
    std::vector<float> actual(expected.size(), kUntouched);
    k->rvq_matmul(view, ptrs.data(), 16, x.data(), m.cols, n, actual.data(), m.rows, 0, m.rows);
    REQUIRE(std::memcmp(actual.data(), expected.data(), expected.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("rvq_matmul gives a token the same bits alone as among 1 to 17 others on every ISA", "[compute][kernels]") {
  // Prefill's per-token rule (compute/forward/expert_batch.hpp) relies on it: a prompt token's
  // expert output must not depend on how many tokens chose the expert in its pass (the token
  // tile it lands in, its place in that tile, a remainder tile) nor on the row split.
  struct Shape { int rows, cols, stages; bool packed6; };
  for (const Shape shape : {Shape{67, 64, 3, false}, Shape{133, 40, 2, false}, Shape{70, 64, 4, true}}) {
    const ExpertMatrix m = make_expert_matrix(shape.rows, shape.cols, shape.stages, shape.packed6, 970 + shape.rows);
    const std::int64_t stride = shape.cols;
    const std::vector<float> probe = random_floats(std::size_t(shape.cols), 971);
    for (const KernelTable* k : waste::kernels::supported()) {
      std::vector<float> solo(std::size_t(shape.rows), kUntouched);
      k->rvq_matmul(m.view, m.book_ptrs.data(), 8, probe.data(), stride, 1, solo.data(), shape.rows, 0, shape.rows);
      for (int n = 2; n <= 18; ++n) {
        std::vector<float> x = random_floats(std::size_t(n) * shape.cols, 972 + n);
        for (int at : {0, n / 2, n - 1}) {
          std::copy(probe.begin(), probe.end(), x.begin() + std::ptrdiff_t(at) * shape.cols);
          std::vector<float> y(std::size_t(n) * shape.rows, kUntouched);
          // Rows in two pieces, the first not a multiple of any row tile.
          const int cut = shape.rows / 3 + 1;
          k->rvq_matmul(m.view, m.book_ptrs.data(), 8, x.data(), stride, n, y.data(), shape.rows, 0, cut);
          k->rvq_matmul(m.view, m.book_ptrs.data(), 8, x.data(), stride, n, y.data(), shape.rows, cut, shape.rows);
          INFO("isa " << k->isa << " rows " << shape.rows << " packed6 " << shape.packed6 << " tokens " << n
                      << " probe at " << at);
          REQUIRE(std::memcmp(y.data() + std::size_t(at) * shape.rows, solo.data(), solo.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

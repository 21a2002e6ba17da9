// The int8 trunk product (compute/kernels/int8_matmul.hpp): activation quantisation by hand, the
// reference within its stated error bound of a float64 product, and the vector kernel bit-equal to
// the reference for any token count and row range.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "compute/kernels/int8_matmul.hpp"
#include "test_kernels_fixtures.hpp"

using namespace waste;

TEST_CASE("int8 acts: per group of 128, scale max/127, rounded to nearest, sums kept, zero groups stay zero") {
  std::vector<float> x(256, 0.0f);
  x[0] = 2.54f;    // the group's max: q = 127
  x[1] = -1.0f;    // -1 * 127 / 2.54 = -50
  x[2] = 0.011f;   // 0.55 -> 1
  x[3] = -0.009f;  // -0.45 -> 0
  kernels::Int8Acts a;
  kernels::quantize_acts(x.data(), 256, 1, 256, a);
  REQUIRE(a.groups == 2);
  CHECK(a.q[0] == 127);
  CHECK(a.q[1] == -50);
  CHECK(a.q[2] == 1);
  CHECK(a.q[3] == 0);
  CHECK(a.sum[0] == 127 - 50 + 1);
  CHECK(a.scale[0] == 2.54f / 127.0f);
  CHECK(a.scale[1] == 0.0f);
  CHECK(a.sum[1] == 0);
  for (int c = 128; c < 256; ++c) CHECK(a.q[std::size_t(c)] == 0);
}

TEST_CASE("int8 product: the reference is within its bound of a float64 product, Q4G and Q8G") {
  const std::uint8_t fmt = GENERATE(std::uint8_t{3}, std::uint8_t{2});
  INFO("format " << int(fmt));
  const std::int64_t rows = 40, cols = 384;
  const int n = 5;
  const test::TrunkMatrix m = test::make_trunk_matrix(fmt, rows, cols, 11);
  std::vector<float> x = test::random_floats(std::size_t(n * cols), 12, -2.0f, 2.0f);
  x[7] = 9.0f;  // an outlier widens its group's scale
  kernels::Int8Acts a;
  kernels::quantize_acts(x.data(), cols, n, cols, a);
  std::vector<float> y(std::size_t(n * rows), -1.0f);
  kernels::matmul_i8_generic(m.view, a, y.data(), rows, 0, rows);
  double worst = 0.0;
  for (int t = 0; t < n; ++t) {
    for (std::int64_t r = 0; r < rows; ++r) {
      double exact = 0.0, bound = 0.0, mag = 0.0;
      for (std::int64_t c = 0; c < cols; ++c) {
        const double wv = m.dequant[std::size_t(r * cols + c)];
        exact += wv * x[std::size_t(t * cols + c)];
        bound += std::fabs(wv) * a.scale[std::size_t(t * a.groups + c / 128)] * 0.5;
        mag += std::fabs(wv * x[std::size_t(t * cols + c)]);
      }
      const double err = std::fabs(y[std::size_t(t * rows + r)] - exact);
      CHECK(err <= bound * (1 + 1e-5) + 1e-5 * mag);
      worst = std::max(worst, err / bound);
    }
  }
  CHECK(worst > 0.01);  // the bound is not vacuous: some outputs use a fair part of it
}

TEST_CASE("int8 product: the vector kernel equals the reference bit for bit, any tokens and row range") {
  if (!kernels::matmul_i8_is_vector()) {
    SUCCEED("no AVX-512 VNNI here (or WASTE_FORCE_ISA): only the reference runs");
    return;
  }
  const std::uint8_t fmt = GENERATE(std::uint8_t{3}, std::uint8_t{2});
  INFO("format " << int(fmt));
  const std::int64_t rows = 85, cols = 256;  // five 16-row tiles and 5 rows left over
  const test::TrunkMatrix m = test::make_trunk_matrix(fmt, rows, cols, 21);
  for (int n : {1, 7, 8, 9, 16, 70}) {
    const std::vector<float> x = test::random_floats(std::size_t(n * cols), 22 + n);
    kernels::Int8Acts a;
    kernels::quantize_acts(x.data(), cols, n, cols, a);
    const std::int64_t ranges[][2] = {{0, rows}, {3, 40}, {16, 80}, {64, 85}, {5, 6}};
    for (const auto& rg : ranges) {
      std::vector<float> want(std::size_t(n * rows), 0.0f), got(std::size_t(n * rows), 0.0f);
      kernels::matmul_i8_generic(m.view, a, want.data(), rows, rg[0], rg[1]);
      kernels::matmul_i8()(m.view, a, got.data(), rows, rg[0], rg[1]);
      INFO("n " << n << " rows [" << rg[0] << ", " << rg[1] << ")");
      CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("int8 product: the few-token kernel equals the reference bit for bit past 16 groups, for 1-15 tokens, and at the extremes") {
  if (!kernels::matmul_i8_is_vector()) {
    SUCCEED("no AVX-512 VNNI here (or WASTE_FORCE_ISA): only the reference runs");
    return;
  }
  const std::uint8_t fmt = GENERATE(std::uint8_t{3}, std::uint8_t{2});
  INFO("format " << int(fmt));
  // 35 groups: two blocks of 16 scales and a short one; rows not a multiple of 16.
  const std::int64_t rows = 37, cols = 35 * 128;
  test::TrunkMatrix m = test::make_trunk_matrix(fmt, rows, cols, 31);
  // Row 0 all the largest code (nibble 15; int8 127), row 1 all the smallest (nibble 0; int8 -128):
  // with x at +-127 the group sums reach their extremes.
  const std::int64_t row_bytes = fmt == 3 ? cols / 2 : cols;
  for (std::int64_t b = 0; b < row_bytes; ++b) {
    m.payload[std::size_t(b)] = fmt == 3 ? 0xFF : 0x7F;
    m.payload[std::size_t(m.view.row_stride + b)] = fmt == 3 ? 0x00 : 0x80;
  }
  for (int n : {1, 2, 3, 4, 5, 7, 8, 9, 13, 15}) {  // groups of 4 tokens per pass, and what is left
    std::vector<float> x = test::random_floats(std::size_t(n * cols), 32 + n);
    for (std::int64_t c = 0; c < 128; ++c) x[std::size_t(c)] = c % 2 ? 4.0f : -4.0f;  // group 0 of token 0 at +-127
    kernels::Int8Acts a;
    kernels::quantize_acts(x.data(), cols, n, cols, a);
    const std::int64_t ranges[][2] = {{0, rows}, {1, 17}, {16, 37}, {36, 37}, {0, 3}};
    for (const auto& rg : ranges) {
      std::vector<float> want(std::size_t(n * rows), 0.0f), got(std::size_t(n * rows), 0.0f);
      kernels::matmul_i8_generic(m.view, a, want.data(), rows, rg[0], rg[1]);
      kernels::matmul_i8()(m.view, a, got.data(), rows, rg[0], rg[1]);
      INFO("n " << n << " rows [" << rg[0] << ", " << rg[1] << ")");
      CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("int8 product: only Q4G and Q8G with groups of 128 take it") {
  CHECK(kernels::int8_matmul_supports(test::make_trunk_matrix(3, 16, 256, 1).view));
  CHECK(kernels::int8_matmul_supports(test::make_trunk_matrix(2, 16, 256, 1).view));
  CHECK_FALSE(kernels::int8_matmul_supports(test::make_trunk_matrix(0, 16, 256, 1).view));
  CHECK_FALSE(kernels::int8_matmul_supports(test::make_trunk_matrix(7, 16, 256, 1).view));
  CHECK_FALSE(kernels::int8_matmul_supports(test::make_trunk_matrix(2, 16, 200, 1).view));
  CHECK_FALSE(kernels::int8_matmul_supports(test::make_trunk_matrix(3, 16, 200, 1).view));
  CHECK_FALSE(kernels::int8_matmul_supports(test::make_trunk_matrix(3, 16, 256, 1, 64).view));
}

// The multi-token trunk matmul against each ISA's own matvec (bit for bit), and the trunk scale
// decode of every ISA against the v0 fp16 decoder (all 65 536 halves).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "compute/kernels/kernels.hpp"
#include "shared/fp16.hpp"
#include "test_kernels_fixtures.hpp"

namespace {

using waste::kernels::KernelTable;
using waste::test::make_trunk_matrix;
using waste::test::random_floats;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("every ISA's matmul gives each token the bits of its matvec", "[compute][kernels]") {
  constexpr std::int64_t kRows = 45;
  struct Range { std::int64_t begin, end; };
  for (const KernelTable* k : waste::kernels::supported()) {
    REQUIRE(k->matmul != nullptr);
    for (std::uint8_t fmt : {std::uint8_t{0}, std::uint8_t{2}, std::uint8_t{3}, std::uint8_t{7}}) {
      for (std::int64_t cols : {std::int64_t{7}, std::int64_t{40}, std::int64_t{128},
                                std::int64_t{301}, std::int64_t{512}}) {
        const auto m = make_trunk_matrix(fmt, kRows, cols, 500 + fmt + static_cast<int>(cols));
        const std::int64_t x_stride = cols + 3;  // tokens are not packed
        const std::int64_t y_stride = kRows + 5;
        for (int n : {1, 2, 3, 4, 5, 7, 9}) {
          const std::vector<float> x = random_floats(static_cast<std::size_t>(x_stride * n), 501 + n);
          for (const Range range : {Range{0, kRows}, Range{3, 40}, Range{13, 14}}) {
            INFO("isa " << k->isa << " fmt " << int(fmt) << " cols " << cols << " n " << n
                        << " rows [" << range.begin << ", " << range.end << ")");
            std::vector<float> y(static_cast<std::size_t>(y_stride * n), 1e30f);
            k->matmul(m.view, x.data(), x_stride, n, y.data(), y_stride, range.begin, range.end);
            for (int t = 0; t < n; ++t) {
              std::vector<float> expected(kRows, 1e30f);
              k->matvec(m.view, x.data() + t * x_stride, expected.data(), range.begin, range.end);
              for (std::int64_t r = 0; r < y_stride; ++r) {
                const float want = r < kRows ? expected[r] : 1e30f;  // untouched outside the range
                REQUIRE(same_bits(y[t * y_stride + r], want));
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("every ISA's matmul agrees with generic within 1e-6 relative for a prefill chunk",
          "[compute][kernels]") {
  constexpr std::int64_t kRows = 70, kCols = 384;
  constexpr int kTokens = 16;
  for (std::uint8_t fmt : {std::uint8_t{0}, std::uint8_t{2}, std::uint8_t{3}, std::uint8_t{7}}) {
    const auto m = make_trunk_matrix(fmt, kRows, kCols, 600 + fmt);
    const std::vector<float> x = random_floats(static_cast<std::size_t>(kCols * kTokens), 601);
    std::vector<float> expected(kRows * kTokens);
    waste::kernels::generic().matmul(m.view, x.data(), kCols, kTokens, expected.data(), kRows, 0, kRows);
    for (const KernelTable* k : waste::kernels::supported()) {
      INFO("isa " << k->isa << " fmt " << int(fmt));
      std::vector<float> actual(kRows * kTokens);
      k->matmul(m.view, x.data(), kCols, kTokens, actual.data(), kRows, 0, kRows);
      for (int t = 0; t < kTokens; ++t) {
        for (std::int64_t r = 0; r < kRows; ++r) {
          double magnitude = 0;
          for (std::int64_t c = 0; c < kCols; ++c) {
            magnitude += std::fabs(m.dequant[r * kCols + c] * x[t * kCols + c]);
          }
          REQUIRE(std::fabs(actual[t * kRows + r] - expected[t * kRows + r]) <= 1e-6 * magnitude);
        }
      }
    }
  }
}

TEST_CASE("every ISA decodes all 65536 fp16 group scales like the v0 decoder", "[compute][kernels]") {
  // Row r: one Q8G group whose scale is the half r, weight 1 at column 0; x = e0. Then y[r] is
  // 1 * scale exactly, whatever the summation order: subnormals, exponent 31 and signs included.
  constexpr std::int64_t kRows = 65536, kCols = 128;
  std::vector<std::uint8_t> payload(kRows * kCols, 0);
  std::vector<std::uint16_t> scales(kRows);
  for (std::int64_t r = 0; r < kRows; ++r) {
    payload[r * kCols] = 1;
    scales[r] = static_cast<std::uint16_t>(r);
  }
  const waste::kernels::QuantMatrix w{payload.data(), scales.data(), kRows, kCols, kCols, 128, 2};
  std::vector<float> x(kCols, 0.0f);
  x[0] = 1.0f;
  for (const KernelTable* k : waste::kernels::supported()) {
    INFO("isa " << k->isa);
    std::vector<float> y(kRows);
    k->matvec(w, x.data(), y.data(), 0, kRows);
    std::int64_t mismatches = 0;
    for (std::int64_t r = 0; r < kRows; ++r) {
      if (y[r] != waste::fp16_to_f32(static_cast<std::uint16_t>(r))) ++mismatches;
    }
    REQUIRE(mismatches == 0);
  }
}

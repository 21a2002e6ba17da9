// The multi-token trunk matmul against each ISA's own matvec (bit for bit), and the trunk scale
// decode of every ISA against the v0 fp16 decoder (all 65 536 halves), and MLA's weighted rows of
// every ISA against their reference.
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

// The AVX2 Q8G decoder takes 32 columns per step and falls back to an 8-column sign extension
// for groups that are a multiple of 16 only; the shifted decode must keep -128, the one code the
// converter never writes but a container may hold. Hazard: a decoder chosen by group width that
// reads past its group, or a code whose shifted form overflows, would pass the group-128 tests.
TEST_CASE("every ISA's Q8G and Q4G matvec and matmul handle groups of 16, 48 and 64 and the -128 code",
          "[compute][kernels]") {
  constexpr std::int64_t kRows = 11;
  for (std::uint8_t fmt : {std::uint8_t{2}, std::uint8_t{3}}) {
    for (int group : {16, 48, 64}) {
      for (std::int64_t cols : {std::int64_t{40}, std::int64_t{301}}) {
        auto m = make_trunk_matrix(fmt, kRows, cols, 700 + fmt + group, group);
        if (fmt == 2) {
          for (std::int64_t r = 0; r < kRows; ++r) {  // every 7th code of every row to -128
            const std::int64_t n_groups = (cols + group - 1) / group;
            for (std::int64_t c = r % 7; c < cols; c += 7) {
              m.payload[static_cast<std::size_t>(r * m.view.row_stride + c)] = 0x80;
              m.dequant[static_cast<std::size_t>(r * cols + c)] =
                  -128.0f * waste::fp16_to_f32(m.scales[static_cast<std::size_t>(r * n_groups + c / group)]);
            }
          }
        }
        constexpr int kTokens = 3;
        const std::vector<float> x = random_floats(static_cast<std::size_t>(cols * kTokens), 701);
        std::vector<float> expected(kRows);
        waste::kernels::generic().matvec(m.view, x.data(), expected.data(), 0, kRows);
        for (const KernelTable* k : waste::kernels::supported()) {
          INFO("isa " << k->isa << " fmt " << int(fmt) << " group " << group << " cols " << cols);
          std::vector<float> actual(kRows, 1e30f);
          k->matvec(m.view, x.data(), actual.data(), 0, kRows);
          for (std::int64_t r = 0; r < kRows; ++r) {
            double magnitude = 0;
            for (std::int64_t c = 0; c < cols; ++c) magnitude += std::fabs(m.dequant[r * cols + c] * x[c]);
            REQUIRE(magnitude > 0);
            REQUIRE(std::fabs(actual[r] - expected[r]) <= 1e-6 * magnitude);
          }
          std::vector<float> y(static_cast<std::size_t>(kRows * kTokens));
          k->matmul(m.view, x.data(), cols, kTokens, y.data(), kRows, 0, kRows);
          for (int t = 0; t < kTokens; ++t) {
            std::vector<float> one(kRows);
            k->matvec(m.view, x.data() + t * cols, one.data(), 0, kRows);
            for (std::int64_t r = 0; r < kRows; ++r) REQUIRE(same_bits(y[t * kRows + r], one[r]));
          }
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

TEST_CASE("weighted rows: the reference is dequantise then multiply-add row by row, and every table gives its bits",
          "[compute][kernels]") {
  // MLA's absorbed query (compute/forward/mla.cpp): rows [row0, row0 + n_rows) weighted by x, summed in row order.
  // Every trunk format (MLA's kv_b is F32 on the tiny presets); the vector kernels take Q4G and Q8G.
  for (const std::uint8_t fmt : {std::uint8_t(3), std::uint8_t(2), std::uint8_t(0), std::uint8_t(7)}) {
    INFO("fmt " << int(fmt));
    const std::int64_t rows = 40, cols = 512;
    const waste::test::TrunkMatrix m = waste::test::make_trunk_matrix(fmt, rows, cols, 41);
    for (const int n : {1, 3}) {
      INFO("tokens " << n);
      const std::int64_t x_stride = 50, y_stride = cols + 16;
      const std::vector<float> x = waste::test::random_floats(std::size_t(n * x_stride), 42 + n);
      const std::vector<float> y0 = waste::test::random_floats(std::size_t(n * y_stride), 43 + n);
      // By hand: the dequantised row (the fixture's), one product and one sum per row, rows 5..36.
      std::vector<float> want = y0;
      for (int i = 0; i < 32; ++i) {
        for (int t = 0; t < n; ++t) {
          for (std::int64_t c = 0; c < cols; ++c) {
            float& yv = want[std::size_t(t * y_stride + c)];
            const float prod = x[std::size_t(t * x_stride + i)] * m.dequant[std::size_t((5 + i) * cols + c)];
            yv = yv + prod;
          }
        }
      }
      std::vector<float> ref = y0;
      waste::kernels::weighted_rows_reference(m.view, 5, 32, x.data(), x_stride, n, ref.data(), y_stride);
      CHECK(std::memcmp(ref.data(), want.data(), want.size() * sizeof(float)) == 0);
      for (const waste::kernels::KernelTable* k : waste::kernels::supported()) {
        INFO(k->isa);
        std::vector<float> got = y0;
        waste::kernels::weighted_rows(*k, m.view, 5, 32, x.data(), x_stride, n, got.data(), y_stride);
        CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
      }
    }
  }
}

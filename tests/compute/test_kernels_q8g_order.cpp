// The AVX-512 Q8G matvec (lm_head's kernel) against a scalar model of its documented summation
// order (compute/kernels/matmul_tiles.hpp), bit for bit: however the tile driver arranges rows,
// groups and prefetches, every row must come out with the bits of that order. Shapes: odd row
// counts and ranges (tile tails), columns with a short last group and a short last step, and
// group counts that cross the 16-group scale block.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string_view>
#include <vector>

#include "compute/kernels/kernels.hpp"
#include "shared/fp16.hpp"
#include "test_kernels_fixtures.hpp"

namespace {

using waste::kernels::KernelTable;
using waste::kernels::QuantMatrix;
using waste::test::make_trunk_matrix;
using waste::test::random_floats;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// One row in the 16-lane order: per group, lane l of the partial sum takes, step by step (32
// columns), column 32s + l then 32s + 16 + l with a fused multiply-add (x past the last column is
// 0); then acc_l = fma(scale, part_l, acc_l); y = ((a0..7 + a8..15) halves summed as 4 + 4, 2 +
// 2, 1 + 1), the register reduction avx512_matvec.cpp's hsum does.
float lane_order_row(const QuantMatrix& w, std::int64_t r, const float* x) {
  constexpr int L = 16;
  const std::int64_t n_groups = (w.cols + w.group - 1) / w.group;
  const std::int64_t steps = (w.cols + 2 * L - 1) / (2 * L);
  const std::int64_t steps_per_group = w.group / (2 * L);
  const std::uint8_t* row = w.payload + r * w.row_stride;
  float acc[L] = {};
  for (std::int64_t g = 0; g < n_groups; ++g) {
    float part[L] = {};
    const std::int64_t s_end = std::min(steps, (g + 1) * steps_per_group);
    for (std::int64_t s = g * steps_per_group; s < s_end; ++s) {
      for (int v = 0; v < 2; ++v) {
        for (int l = 0; l < L; ++l) {
          const std::int64_t c = s * 2 * L + v * L + l;
          const float code = static_cast<float>(static_cast<std::int8_t>(row[c]));
          part[l] = std::fma(code, c < w.cols ? x[c] : 0.0f, part[l]);
        }
      }
    }
    const float scale = waste::fp16_to_f32(w.scales[r * n_groups + g]);
    for (int l = 0; l < L; ++l) acc[l] = std::fma(scale, part[l], acc[l]);
  }
  float h[8], q[4];
  for (int i = 0; i < 8; ++i) h[i] = acc[i] + acc[i + 8];
  for (int i = 0; i < 4; ++i) q[i] = h[i] + h[i + 4];
  return (q[0] + q[2]) + (q[1] + q[3]);
}

}  // namespace

TEST_CASE("the AVX-512 Q8G matvec gives every row the bits of its 16-lane summation order",
          "[compute][kernels]") {
  struct Range { std::int64_t begin, end; };
  bool ran = false;
  for (const KernelTable* k : waste::kernels::supported()) {
    if (!std::string_view(k->isa).starts_with("avx512")) continue;
    ran = true;
    // 301: a short last group (45 columns) and a short last step; 2304: lm_head's 18 groups (a
    // 16-group scale block, then 2); 4224: 33 groups (two full blocks and one group).
    for (std::int64_t cols : {std::int64_t{128}, std::int64_t{301}, std::int64_t{384},
                              std::int64_t{2304}, std::int64_t{4224}}) {
      for (std::int64_t rows : {std::int64_t{1}, std::int64_t{7}, std::int64_t{37}}) {
        const auto m = make_trunk_matrix(2, rows, cols, 900 + static_cast<std::uint32_t>(cols + rows));
        const std::vector<float> x = random_floats(static_cast<std::size_t>(cols), 901);
        for (const Range range : {Range{0, rows}, Range{rows / 3, rows}, Range{1, rows - 1}}) {
          if (range.begin >= range.end) continue;
          INFO("isa " << k->isa << " cols " << cols << " rows " << rows << " range [" << range.begin
                      << ", " << range.end << ")");
          std::vector<float> y(static_cast<std::size_t>(rows), 1e30f);
          k->matvec(m.view, x.data(), y.data(), range.begin, range.end);
          for (std::int64_t r = 0; r < rows; ++r) {
            const bool inside = r >= range.begin && r < range.end;
            const float want = inside ? lane_order_row(m.view, r, x.data()) : 1e30f;
            REQUIRE(same_bits(y[r], want));
          }
        }
      }
    }
  }
  if (!ran) SUCCEED("no AVX-512 table on this CPU");
}

// The same order with a large activation spread: x mixes magnitudes 1e-6..1e6 so that a changed
// order would round differently; splitting the rows as the thread pool does must not change a bit.
TEST_CASE("the AVX-512 Q8G matvec keeps its bits for wide-range activations and any row split",
          "[compute][kernels]") {
  constexpr std::int64_t kRows = 203, kCols = 2304;
  const auto m = make_trunk_matrix(2, kRows, kCols, 977);
  std::vector<float> x = random_floats(static_cast<std::size_t>(kCols), 978);
  for (std::int64_t c = 0; c < kCols; ++c) x[c] *= std::pow(10.0f, static_cast<float>(c % 13) - 6.0f);
  for (const KernelTable* k : waste::kernels::supported()) {
    if (!std::string_view(k->isa).starts_with("avx512")) continue;
    INFO("isa " << k->isa);
    std::vector<float> whole(kRows), split(kRows);
    k->matvec(m.view, x.data(), whole.data(), 0, kRows);
    for (std::int64_t b = 0; b < kRows; b += 61) k->matvec(m.view, x.data(), split.data(), b, std::min(kRows, b + 61));
    for (std::int64_t r = 0; r < kRows; ++r) {
      REQUIRE(same_bits(whole[r], lane_order_row(m.view, r, x.data())));
      REQUIRE(same_bits(split[r], whole[r]));
    }
  }
}

// The generic (scalar reference) kernels against dequantise-then-dot references built in the test.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "compute/kernels/kernels.hpp"
#include "test_kernels_fixtures.hpp"

namespace {

using waste::kernels::generic;
using waste::kernels::lut_quant_blocks;
using waste::test::make_expert_matrix;
using waste::test::make_trunk_matrix;
using waste::test::random_floats;
using waste::test::reference_matvec;

constexpr float kSentinel = 12345.0f;

void require_close(const std::vector<float>& y, const waste::test::Reference& ref, int begin,
                   int end, double rel) {
  for (int r = begin; r < end; ++r) {
    INFO("row " << r);
    REQUIRE(std::fabs(y[r] - ref.y[r]) <= rel * ref.magnitude[r] + 1e-30);
  }
}

// One f32 LUT for x, laid out [v][stage][entry].
std::vector<float> build_lut(const waste::test::ExpertMatrix& m, const std::vector<float>& x) {
  std::vector<float> lut(static_cast<std::size_t>(m.view.n_vectors) * m.stages * m.entries);
  generic().rvq_lut_build(x.data(), m.book_ptrs.data(), m.stages, m.entries, 8, 0,
                          m.view.n_vectors, lut.data());
  return lut;
}

}  // namespace

TEST_CASE("generic matvec matches a dequantise-then-dot reference for every trunk format",
          "[compute][kernels]") {
  const std::int64_t rows = 37;
  const std::int64_t cols = 301;  // three groups, the last one short (not a multiple of 128)
  const std::vector<float> x = random_floats(cols, 7);
  for (std::uint8_t fmt : {std::uint8_t{0}, std::uint8_t{2}, std::uint8_t{3}, std::uint8_t{7}}) {
    INFO("fmt " << int(fmt));
    const auto m = make_trunk_matrix(fmt, rows, cols, 100 + fmt);
    const auto ref = reference_matvec(m.dequant, rows, cols, x);
    std::vector<float> y(rows, kSentinel);
    generic().matvec(m.view, x.data(), y.data(), 0, rows);
    require_close(y, ref, 0, static_cast<int>(rows), 1e-5);
  }
}

TEST_CASE("generic matvec writes exactly the requested row range", "[compute][kernels]") {
  const auto m = make_trunk_matrix(3, 20, 130, 5);
  const std::vector<float> x = random_floats(130, 6);
  std::vector<float> part(20, kSentinel);
  generic().matvec(m.view, x.data(), part.data(), 5, 11);
  std::vector<float> full(20);
  generic().matvec(m.view, x.data(), full.data(), 0, 20);
  for (int r = 0; r < 20; ++r) {
    INFO("row " << r);
    if (r >= 5 && r < 11) {
      REQUIRE(part[r] == full[r]);
    } else {
      REQUIRE(part[r] == kSentinel);
    }
  }
}

TEST_CASE("generic matvec uses the v0 order: per-group partial sums scaled then accumulated",
          "[compute][kernels]") {
  // One row, two groups with scales 1 and 2^-24 (an fp16 subnormal, which must not be flushed).
  std::vector<std::uint8_t> payload(256, 0);
  payload[0] = 3;                           // group 0: 3 * x[0]
  payload[128] = static_cast<std::uint8_t>(-5);  // group 1: -5 * x[128]
  const std::uint16_t scales[2] = {waste::f32_to_fp16(1.0f), 0x0001};
  std::vector<float> x(200, 0.0f);
  x[0] = 2.0f;
  x[128] = 4.0f;
  const waste::kernels::QuantMatrix w{payload.data(), scales, 1, 200, 256, 128, 2};
  float y = 0;
  generic().matvec(w, x.data(), &y, 0, 1);
  REQUIRE(y == 6.0f + std::ldexp(-20.0f, -24));
}

TEST_CASE("generic RVQ LUT entries are the dot products of x with each centroid",
          "[compute][kernels]") {
  const auto m = make_expert_matrix(64, 8 * 5, 3, false, 11);
  const std::vector<float> x = random_floats(40, 12);
  const std::vector<float> lut = build_lut(m, x);
  for (int v = 0; v < 5; ++v) {
    for (int s = 0; s < 3; ++s) {
      for (int e : {0, 1, 77, 255}) {
        double dot = 0;
        for (int d = 0; d < 8; ++d) dot += double(x[v * 8 + d]) * m.books[s][e * 8 + d];
        REQUIRE(lut[(v * 3 + s) * 256 + e] == Approx(dot).epsilon(1e-5).margin(1e-6));
      }
    }
  }
}

TEST_CASE("generic RVQ apply equals W x with W expanded from indices and codebooks",
          "[compute][kernels]") {
  // 150 rows = two full index blocks and a short one; 296 columns = 37 vectors.
  for (int stages : {3, 2}) {
    INFO("stages " << stages);
    const auto m = make_expert_matrix(150, 296, stages, false, 20 + stages);
    const std::vector<float> x = random_floats(296, 30);
    const std::vector<float> lut = build_lut(m, x);
    const auto ref = reference_matvec(m.w, m.rows, m.cols, x);
    std::vector<float> y(150, kSentinel);
    generic().rvq_apply(m.view, lut.data(), m.entries, y.data(), 0, 150);
    require_close(y, ref, 0, 150, 1e-5);

    // Row ranges on block boundaries give the same bits as the whole matrix.
    std::vector<float> split(150, kSentinel);
    generic().rvq_apply(m.view, lut.data(), m.entries, split.data(), 64, 150);
    REQUIRE(split[63] == kSentinel);
    generic().rvq_apply(m.view, lut.data(), m.entries, split.data(), 0, 64);
    REQUIRE(std::memcmp(split.data(), y.data(), 150 * sizeof(float)) == 0);
  }
}

TEST_CASE("LUT quantisation rounds half to even with the 127/mx inverse, per 32-vector block",
          "[compute][kernels]") {
  // Two vectors x 1 stage x 4 entries... but blocks are 32 vectors: use 33 vectors so the
  // second block holds only the last one.
  const int n_vectors = 33, stages = 1, entries = 4;
  std::vector<float> lut(n_vectors * entries, 0.0f);
  // Block 0: max 127 so the inverse is exactly 1; x.5 values show the rounding rule.
  lut[0] = 2.5f;
  lut[1] = 3.5f;
  lut[2] = -2.5f;
  lut[3] = -127.0f;
  lut[4] = 0.49f;
  lut[5] = 126.5f;
  // Block 1 (vector 32): max 0.5, inverse 254: 0.25 -> 63.5 -> 64.
  lut[32 * entries + 0] = 0.5f;
  lut[32 * entries + 1] = 0.25f;
  lut[32 * entries + 2] = -0.001f;
  std::vector<std::int8_t> q(lut.size(), 99);
  std::vector<float> scales(lut_quant_blocks(n_vectors), -1.0f);
  REQUIRE(scales.size() == 2);
  generic().rvq_lut_quantize(lut.data(), n_vectors, stages, entries, q.data(), scales.data());
  CHECK(scales[0] == 1.0f);
  CHECK(scales[1] == 0.5f / 127.0f);
  const std::vector<int> expected_block0 = {2, 4, -2, -127, 0, 126};
  for (int i = 0; i < 6; ++i) CHECK(int(q[i]) == expected_block0[i]);
  CHECK(int(q[6]) == 0);
  CHECK(int(q[32 * entries + 0]) == 127);
  CHECK(int(q[32 * entries + 1]) == 64);
  CHECK(int(q[32 * entries + 2]) == 0);  // -0.254 rounds to 0
}

TEST_CASE("LUT quantisation of an all-zero block gives scale 0 and zero codes",
          "[compute][kernels]") {
  std::vector<float> lut(4 * 64 * 3, 0.0f);
  std::vector<std::int8_t> q(lut.size(), 5);
  float scale = -1.0f;
  generic().rvq_lut_quantize(lut.data(), 3, 4, 64, q.data(), &scale);
  REQUIRE(scale == 0.0f);
  for (std::int8_t v : q) REQUIRE(v == 0);
}

TEST_CASE("generic VQ4P apply equals the block-scaled int8 LUT sum over the unpacked indices",
          "[compute][kernels]") {
  const auto m = make_expert_matrix(150, 8 * 45, 4, true, 40);  // 45 vectors: blocks of 32 + 13
  const std::vector<float> x = random_floats(m.cols, 41);
  const std::vector<float> lut = build_lut(m, x);
  const int n_vectors = m.view.n_vectors;
  std::vector<std::int8_t> lut_q(lut.size());
  std::vector<float> block_scales(lut_quant_blocks(n_vectors));
  generic().rvq_lut_quantize(lut.data(), n_vectors, 4, 64, lut_q.data(), block_scales.data());

  std::vector<float> y(150, kSentinel);
  generic().rvq_apply_vq4p(m.view, lut_q.data(), block_scales.data(), y.data(), 0, 150);
  const auto exact = reference_matvec(m.w, m.rows, m.cols, x);
  for (int r = 0; r < 150; ++r) {
    INFO("row " << r);
    double acc = 0, magnitude = 0;
    for (int v = 0; v < n_vectors; ++v) {
      const auto& ids = m.idx[static_cast<std::size_t>(r) * n_vectors + v];
      for (int s = 0; s < 4; ++s) {
        const double term = double(block_scales[v / 32]) * lut_q[(v * 4 + s) * 64 + ids[s]];
        acc += term;
        magnitude += std::fabs(term);
      }
    }
    float row_scale;
    std::uint16_t h;
    std::memcpy(&h, m.scale_bytes.data() + 1 + 2 * r, 2);
    row_scale = waste::fp16_to_f32(h);
    REQUIRE(std::fabs(y[r] - acc * row_scale) <= 1e-5 * magnitude * row_scale);
    // And the int8 LUT stays close to the exact product (quantisation error only).
    REQUIRE(std::fabs(y[r] - exact.y[r]) <= 0.02 * exact.magnitude[r]);
  }
}

TEST_CASE("generic KDA head step follows decay, delta update, then output on the new state",
          "[compute][kernels]") {
  const int D = 16;
  std::vector<float> S = random_floats(D * D, 50);
  const std::vector<float> q = random_floats(D, 51), k = random_floats(D, 52),
                           v = random_floats(D, 53), g = random_floats(D, 54, -2.0f, 0.0f);
  const float beta = 0.7f;
  // Reference in double, written from §3.4 step 4 with explicit matrices.
  std::vector<double> Sd(S.begin(), S.end());
  for (int i = 0; i < D; ++i)
    for (int j = 0; j < D; ++j) Sd[i * D + j] *= std::exp(double(g[i]));
  std::vector<double> delta(D);
  for (int j = 0; j < D; ++j) {
    double u = 0;
    for (int i = 0; i < D; ++i) u += Sd[i * D + j] * k[i];
    delta[j] = beta * (v[j] - u);
  }
  for (int i = 0; i < D; ++i)
    for (int j = 0; j < D; ++j) Sd[i * D + j] += double(k[i]) * delta[j];
  std::vector<float> o(D, kSentinel);
  generic().kda_head_step(S.data(), q.data(), k.data(), v.data(), g.data(), beta, D, o.data());
  for (int j = 0; j < D; ++j) {
    double expected = 0;
    for (int i = 0; i < D; ++i) expected += Sd[i * D + j] * q[i];
    REQUIRE(o[j] == Approx(expected).epsilon(1e-5).margin(1e-5));
  }
  for (int i = 0; i < D * D; ++i) REQUIRE(S[i] == Approx(Sd[i]).epsilon(1e-5).margin(1e-6));
}

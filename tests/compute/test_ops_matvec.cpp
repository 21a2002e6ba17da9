// forward::matvec_tokens (one kernel matmul per row chunk) against n forward::matvec calls.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "compute/forward/fused_matvec.hpp"
#include "compute/forward/ops.hpp"
#include "compute/kernels/int8_matmul.hpp"
#include "int8_prefill_guard.hpp"
#include "compute/kernels/kernels.hpp"
#include "compute/model/decode_head.hpp"
#include "compute/runtime/thread_pool.hpp"
#include "test_kernels_fixtures.hpp"

TEST_CASE("matvec_tokens equals one matvec per token bit for bit, on every ISA and pool size",
          "[compute][kernels]") {
  constexpr std::int64_t kRows = 300, kCols = 520;  // several row chunks; a partial group
  constexpr int kTokens = 11;
  const auto m = waste::test::make_trunk_matrix(3, kRows, kCols, 700);
  const std::int64_t x_stride = kCols + 1, y_stride = kRows + 2;
  const std::vector<float> x = waste::test::random_floats(static_cast<std::size_t>(x_stride * kTokens), 701);
  for (const waste::kernels::KernelTable* k : waste::kernels::supported()) {
    for (int threads : {1, 2, 3}) {
      INFO("isa " << k->isa << " threads " << threads);
      waste::ThreadPool pool(threads);
      const waste::forward::Exec exec{pool, *k};
      std::vector<float> y(static_cast<std::size_t>(y_stride * kTokens), -3.0f);
      std::vector<float> expected = y;
      waste::forward::matvec_tokens(exec, m.view, x.data(), x_stride, kTokens, y.data(), y_stride);
      for (int t = 0; t < kTokens; ++t) {
        waste::forward::matvec(exec, m.view, x.data() + t * x_stride, expected.data() + t * y_stride);
      }
      REQUIRE(std::memcmp(y.data(), expected.data(), y.size() * sizeof(float)) == 0);
    }
  }
}

// MLA multiplies by dequantised kv_b rows; q * scale is exact in f32, so every way of computing
// it must give the fixture's values bit for bit. Hazard: the byte-wise Q4G loop swapping the
// nibbles, or dropping the odd last column of a row whose width is odd.
TEST_CASE("dequantize_row gives each weight's q * scale bit for bit for every trunk format",
          "[compute][forward]") {
  for (std::uint8_t fmt : {std::uint8_t{0}, std::uint8_t{2}, std::uint8_t{3}, std::uint8_t{7}}) {
    for (int group : {48, 128}) {
      for (std::int64_t cols : {std::int64_t{7}, std::int64_t{301}, std::int64_t{512}}) {
        INFO("fmt " << int(fmt) << " group " << group << " cols " << cols);
        constexpr std::int64_t kRows = 5;
        const auto m = waste::test::make_trunk_matrix(fmt, kRows, cols, 800 + fmt + group, group);
        for (std::int64_t r = 0; r < kRows; ++r) {
          std::vector<float> row(static_cast<std::size_t>(cols), 1e30f);
          waste::forward::dequantize_row(m.view, r, row.data());
          REQUIRE(std::memcmp(row.data(), m.dequant.data() + r * cols, row.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

// KDA runs q, k, v, f_a and b_proj as one pool job. Hazard: a chunk that straddles two matrices
// writing one's rows into the other's output, or a matrix's first or last rows computed twice or
// not at all; the outputs are pre-filled and their padding must stay untouched.
TEST_CASE("matvec_tokens_fused equals one matvec_tokens per matrix bit for bit, on every ISA and pool size",
          "[compute][forward]") {
  constexpr std::int64_t kCols = 300;
  struct Spec { std::uint8_t fmt; std::int64_t rows; };
  const Spec specs[] = {{3, 200}, {3, 64}, {2, 7}, {3, 130}, {0, 33}};
  std::vector<waste::test::TrunkMatrix> ms;
  for (const Spec& sp : specs) ms.push_back(waste::test::make_trunk_matrix(sp.fmt, sp.rows, kCols, 900 + int(sp.rows)));
  for (int n : {1, 3}) {
    const std::int64_t x_stride = kCols + 2;
    const std::vector<float> x = waste::test::random_floats(static_cast<std::size_t>(x_stride * n), 901);
    for (const waste::kernels::KernelTable* k : waste::kernels::supported()) {
      for (int threads : {1, 2, 3}) {
        INFO("isa " << k->isa << " threads " << threads << " tokens " << n);
        waste::ThreadPool pool(threads);
        const waste::forward::Exec exec{pool, *k};
        std::vector<std::vector<float>> fused, expected;
        std::vector<waste::forward::Projection> ps;
        for (const auto& m : ms) {
          const std::int64_t y_stride = m.view.rows + 3;
          fused.emplace_back(static_cast<std::size_t>(y_stride * n), -3.0f);
          expected.emplace_back(static_cast<std::size_t>(y_stride * n), -3.0f);
          waste::forward::matvec_tokens(exec, m.view, x.data(), x_stride, n, expected.back().data(), y_stride);
        }
        for (std::size_t i = 0; i < ms.size(); ++i) ps.push_back({&ms[i].view, fused[i].data(), ms[i].view.rows + 3});
        waste::forward::matvec_tokens_fused(exec, ps, x.data(), x_stride, n);
        for (std::size_t i = 0; i < ms.size(); ++i) {
          REQUIRE(std::memcmp(fused[i].data(), expected[i].data(), fused[i].size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

// The lm_head under the decode rule (ops.hpp head_tokens): decode rows take the int8 product, prompt
// rows the f32 kernels, each row the bits it gets alone, in any mix; with the rule off every row is
// f32. Hazards: a prompt row quantised (its logits would move with the decode rule), or a run of
// rows of one kind given the other kind's product.
TEST_CASE("head_tokens: decode rows by the int8 product under the decode rule, prompt rows by f32, each as alone",
          "[compute][kernels]") {
  constexpr std::int64_t kRows = 200, kCols = 384;
  const auto m = waste::test::make_trunk_matrix(2, kRows, kCols, 900);  // Q8G, as every v0 lm_head
  REQUIRE(waste::kernels::int8_matmul_supports(m.view));
  const std::int64_t x_stride = kCols + 3, y_stride = kRows + 1;
  const unsigned char kinds[] = {0, 1, 0, 0, 1, 1, 0};
  constexpr int kTokens = 7;
  const std::vector<float> x = waste::test::random_floats(static_cast<std::size_t>(x_stride * kTokens), 901);
  waste::ThreadPool pool(2);
  const waste::forward::Exec exec{pool, waste::kernels::active()};
  auto q6 = waste::model::DecodeHead::requantize(m.view, waste::forward::HeadMode::q6, pool);
  auto q4 = waste::model::DecodeHead::requantize(m.view, waste::forward::HeadMode::q4, pool);
  REQUIRE(q6);
  REQUIRE(q4);
  for (const int copy : {8, 6, 4}) {
    // Decode rows read w_decode: the matrix itself or its copy (head_mode.hpp); prompt rows the matrix.
    const waste::kernels::QuantMatrix& w_decode = copy == 6 ? q6->matrix() : copy == 4 ? q4->matrix() : m.view;
    for (const bool rule : {true, false}) {
      INFO("decode rule " << rule << " decode head q" << copy);
      waste::test::Int8PrefillGuard mode(true, rule);
      std::vector<float> y(static_cast<std::size_t>(y_stride * kTokens), -3.0f);
      waste::forward::head_tokens(exec, m.view, w_decode, x.data(), x_stride, kinds, y.data(), y_stride);
      for (int t = 0; t < kTokens; ++t) {
        INFO("row " << t << " kind " << int(kinds[t]));
        std::vector<float> alone(static_cast<std::size_t>(kRows), -5.0f);
        const bool int8 = rule && kinds[t] == 0;
        if (int8) {
          waste::kernels::Int8Acts a;
          waste::kernels::quantize_acts(x.data() + t * x_stride, kCols, 1, kCols, a);
          waste::kernels::matmul_i8_generic(w_decode, a, alone.data(), kRows, 0, kRows);
        } else {
          waste::forward::matvec(exec, m.view, x.data() + t * x_stride, alone.data());
        }
        CHECK(std::memcmp(y.data() + t * y_stride, alone.data(), alone.size() * sizeof(float)) == 0);
        // And it is not the other kind's product.
        std::vector<float> other(static_cast<std::size_t>(kRows), -5.0f);
        if (int8) {
          waste::forward::matvec(exec, m.view, x.data() + t * x_stride, other.data());
        } else {
          waste::kernels::Int8Acts a;
          waste::kernels::quantize_acts(x.data() + t * x_stride, kCols, 1, kCols, a);
          waste::kernels::matmul_i8_generic(w_decode, a, other.data(), kRows, 0, kRows);
        }
        CHECK(std::memcmp(y.data() + t * y_stride, other.data(), other.size() * sizeof(float)) != 0);
      }
    }
  }
}

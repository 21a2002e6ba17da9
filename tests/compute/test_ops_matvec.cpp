// forward::matvec_tokens (one kernel matmul per row chunk) against n forward::matvec calls.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "compute/forward/ops.hpp"
#include "compute/kernels/kernels.hpp"
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

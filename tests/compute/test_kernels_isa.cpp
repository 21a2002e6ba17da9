// Every ISA this CPU supports against the generic reference (Highway-style per-target tests):
// the RVQ entries bit for bit, matvec and the KDA step within documented tolerances.
#include <catch2/catch.hpp>

#include <cstdlib>

#include <cmath>
#include <cstring>
#include <string_view>
#include <vector>

#include "compute/kernels/kernels.hpp"
#include "test_kernels_fixtures.hpp"

namespace {

using waste::kernels::generic;
using waste::kernels::KernelTable;
using waste::kernels::lut_quant_blocks;
using waste::test::make_expert_matrix;
using waste::test::make_trunk_matrix;
using waste::test::random_floats;

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace

TEST_CASE("the generic table is always supported and listed first", "[compute][kernels]") {
  const auto tables = waste::kernels::supported();
  REQUIRE(!tables.empty());
  REQUIRE(tables[0] == &generic());
  REQUIRE(waste::kernels::find("generic") == &generic());
  REQUIRE(waste::kernels::find("no-such-isa") == nullptr);
  const KernelTable& active = waste::kernels::active();
  REQUIRE(waste::kernels::find(active.isa) == &active);
}

#if defined(__x86_64__)
// Without this, a VBMI table that dispatch forgot to list would leave its VQ4P apply untested
// (the bit-identity tests loop over supported()).
TEST_CASE("on a CPU with AVX-512 VBMI the avx512vbmi table is supported and chosen", "[compute][kernels]") {
  __builtin_cpu_init();
  const bool vbmi = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                    __builtin_cpu_supports("avx512vbmi");
  REQUIRE((waste::kernels::find("avx512vbmi") != nullptr) == vbmi);
  const char* forced = std::getenv("WASTE_FORCE_ISA");
  if (vbmi && (forced == nullptr || *forced == '\0')) {
    REQUIRE(std::string_view(waste::kernels::active().isa) == "avx512vbmi");
  }
}
#endif

#if defined(__aarch64__)
// Run by the cross test (tests/cross/) under qemu-aarch64: without this, a NEON table that
// dispatch forgot to list would leave only generic to compare with itself.
TEST_CASE("on AArch64 the NEON table is supported and chosen", "[compute][kernels]") {
  REQUIRE(waste::kernels::find("neon") != nullptr);
  REQUIRE(std::string_view(waste::kernels::active().isa) == "neon");
}
#endif

// Measured worst case 1.1e-7 (Q4G, FMA with per-lane partial sums); 1e-6 leaves a 9x margin.
TEST_CASE("every ISA's matvec agrees with generic within 1e-6 relative", "[compute][kernels]") {
  for (const KernelTable* k : waste::kernels::supported()) {
    for (std::uint8_t fmt : {std::uint8_t{0}, std::uint8_t{2}, std::uint8_t{3}, std::uint8_t{7}}) {
      for (std::int64_t cols : {std::int64_t{7}, std::int64_t{301}, std::int64_t{512}}) {
        INFO("isa " << k->isa << " fmt " << int(fmt) << " cols " << cols);
        const auto m = make_trunk_matrix(fmt, 29, cols, 200 + fmt);
        const std::vector<float> x = random_floats(static_cast<std::size_t>(cols), 201);
        std::vector<float> expected(29), actual(29, 1e30f);
        generic().matvec(m.view, x.data(), expected.data(), 0, 29);
        k->matvec(m.view, x.data(), actual.data(), 3, 29);
        REQUIRE(actual[0] == 1e30f);
        for (int r = 3; r < 29; ++r) {
          double magnitude = 0;
          for (std::int64_t c = 0; c < cols; ++c) magnitude += std::fabs(m.dequant[r * cols + c] * x[c]);
          REQUIRE(std::fabs(actual[r] - expected[r]) <= 1e-6 * magnitude);
        }
      }
    }
  }
}

TEST_CASE("every ISA builds, quantises and applies RVQ LUTs bit-identically to generic",
          "[compute][kernels]") {
  struct Shape { int rows, cols, stages; bool packed6; };
  for (const Shape shape : {Shape{150, 296, 3, false}, Shape{200, 64, 2, false},
                            Shape{70, 8, 1, false}, Shape{150, 8 * 45, 4, true},
                            Shape{64, 8 * 32, 4, true}}) {
    const auto m = make_expert_matrix(shape.rows, shape.cols, shape.stages, shape.packed6,
                                      300 + shape.rows + shape.stages);
    const int n_vectors = m.view.n_vectors;
    const std::vector<float> x = random_floats(static_cast<std::size_t>(shape.cols), 301);
    std::vector<float> lut_ref(static_cast<std::size_t>(n_vectors) * m.stages * m.entries);
    generic().rvq_lut_build(x.data(), m.book_ptrs.data(), m.stages, m.entries, 8, 0, n_vectors,
                            lut_ref.data());
    for (const KernelTable* k : waste::kernels::supported()) {
      INFO("isa " << k->isa << " rows " << shape.rows << " stages " << shape.stages);
      // LUT build over two sub-ranges of vector positions.
      std::vector<float> lut(lut_ref.size(), -7.0f);
      const int mid = n_vectors / 2;
      k->rvq_lut_build(x.data(), m.book_ptrs.data(), m.stages, m.entries, 8, 0, mid, lut.data());
      k->rvq_lut_build(x.data(), m.book_ptrs.data(), m.stages, m.entries, 8, mid, n_vectors,
                       lut.data());
      REQUIRE(same_bits(lut, lut_ref));

      if (!shape.packed6) {
        std::vector<float> expected(shape.rows), actual(shape.rows, -1.0f);
        generic().rvq_apply(m.view, lut_ref.data(), m.entries, expected.data(), 0, shape.rows);
        k->rvq_apply(m.view, lut_ref.data(), m.entries, actual.data(), 0, shape.rows);
        REQUIRE(same_bits(actual, expected));
        continue;
      }
      std::vector<std::int8_t> q_ref(lut_ref.size()), q(lut_ref.size());
      std::vector<float> s_ref(lut_quant_blocks(n_vectors)), s(lut_quant_blocks(n_vectors));
      generic().rvq_lut_quantize(lut_ref.data(), n_vectors, 4, 64, q_ref.data(), s_ref.data());
      k->rvq_lut_quantize(lut_ref.data(), n_vectors, 4, 64, q.data(), s.data());
      REQUIRE(same_bits(q, q_ref));
      REQUIRE(same_bits(s, s_ref));
      std::vector<float> expected(shape.rows), actual(shape.rows, -1.0f);
      generic().rvq_apply_vq4p(m.view, q_ref.data(), s_ref.data(), expected.data(), 0, shape.rows);
      k->rvq_apply_vq4p(m.view, q_ref.data(), s_ref.data(), actual.data(), 0, shape.rows);
      REQUIRE(same_bits(actual, expected));
    }
  }
}

TEST_CASE("every ISA's KDA head step agrees with generic within 1e-6 relative",
          "[compute][kernels]") {
  for (int D : {128, 20}) {
    const std::vector<float> S0 = random_floats(static_cast<std::size_t>(D * D), 400);
    const std::vector<float> q = random_floats(D, 401), k = random_floats(D, 402),
                             v = random_floats(D, 403), g = random_floats(D, 404, -1.0f, 0.0f);
    std::vector<float> S_ref = S0, o_ref(D);
    // Three steps, so the state carries the differences forward.
    for (int step = 0; step < 3; ++step) {
      generic().kda_head_step(S_ref.data(), q.data(), k.data(), v.data(), g.data(), 0.6f, D,
                              o_ref.data());
    }
    for (const KernelTable* table : waste::kernels::supported()) {
      INFO("isa " << table->isa << " D " << D);
      std::vector<float> S = S0, o(D);
      for (int step = 0; step < 3; ++step) {
        table->kda_head_step(S.data(), q.data(), k.data(), v.data(), g.data(), 0.6f, D, o.data());
      }
      float o_scale = 0, s_scale = 0;
      for (float value : o_ref) o_scale = std::max(o_scale, std::fabs(value));
      for (float value : S_ref) s_scale = std::max(s_scale, std::fabs(value));
      for (int j = 0; j < D; ++j) REQUIRE(std::fabs(o[j] - o_ref[j]) <= 1e-6f * o_scale);
      for (int i = 0; i < D * D; ++i) REQUIRE(std::fabs(S[i] - S_ref[i]) <= 1e-6f * s_scale);
    }
  }
}

TEST_CASE("the AVX-512 KDA head step gives the AVX2 kernel's bits, every head dim it takes and one it hands on",
          "[compute][kernels]") {
  const KernelTable* avx2 = waste::kernels::find("avx2");
  const KernelTable* avx512 = waste::kernels::find("avx512");
  if (avx2 == nullptr || avx512 == nullptr) {
    SUCCEED("no AVX-512 here");
    return;
  }
  for (int D : {64, 128, 256, 40}) {
    INFO("D " << D);
    const std::vector<float> S0 = random_floats(static_cast<std::size_t>(D * D), 410);
    const std::vector<float> q = random_floats(D, 411), k = random_floats(D, 412), v = random_floats(D, 413),
                             g = random_floats(D, 414, -1.0f, 0.0f);
    std::vector<float> S_a = S0, S_b = S0, o_a(D), o_b(D);
    for (int step = 0; step < 3; ++step) {
      avx2->kda_head_step(S_a.data(), q.data(), k.data(), v.data(), g.data(), 0.6f, D, o_a.data());
      avx512->kda_head_step(S_b.data(), q.data(), k.data(), v.data(), g.data(), 0.6f, D, o_b.data());
    }
    REQUIRE(same_bits(o_a, o_b));
    REQUIRE(same_bits(S_a, S_b));
  }
}

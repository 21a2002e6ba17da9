// The q16 LUT mode's kernels (compute/forward/lut_mode.hpp): int16 tables made in place from the
// f32 LUT and looked up by every ISA with generic's bits; the layout written by hand; the
// distance to the f32 apply within the documented bound; stage sums that reach the range's
// edge without overflowing; the setting's parser; the default (q16 exactly where the kernel table
// has a vector q16 apply) and WASTE_LUT overriding it both ways.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "compute/forward/lut_mode.hpp"
#include "compute/kernels/kernels.hpp"
#include "shared/fp16.hpp"
#include "test_kernels_fixtures.hpp"

namespace {

using waste::kernels::generic;
using waste::kernels::KernelTable;
using waste::test::ExpertMatrix;
using waste::test::make_expert_matrix;
using waste::test::random_floats;

constexpr float kUntouched = -12345.0f;

std::vector<float> f32_lut(const ExpertMatrix& m, const std::vector<float>& x) {
  std::vector<float> lut(static_cast<std::size_t>(m.view.n_vectors) * m.stages * m.entries);
  generic().rvq_lut_build(x.data(), m.book_ptrs.data(), m.stages, m.entries, 8, 0, m.view.n_vectors, lut.data());
  return lut;
}

std::int16_t q_at(const std::vector<float>& lut, int per_vector, int v, int i) {
  std::int16_t q;
  std::memcpy(&q, reinterpret_cast<const unsigned char*>(lut.data() + std::size_t(v) * per_vector) + 2 * i, 2);
  return q;
}
float scale_at(const std::vector<float>& lut, int per_vector, int v) {
  float s;
  std::memcpy(&s, reinterpret_cast<const unsigned char*>(lut.data() + std::size_t(v) * per_vector) + 2 * per_vector, 4);
  return s;
}

float row_scale(const ExpertMatrix& m, int r) {
  std::uint16_t h;
  std::memcpy(&h, m.scale_bytes.data() + 1 + 2 * r, 2);
  return waste::fp16_to_f32(h);
}

struct Shape { int rows, cols, stages; };
constexpr Shape kShapes[] = {{1, 24, 3}, {17, 40, 3}, {63, 8, 1}, {129, 56, 2}, {577, 72, 3}, {1030, 32, 3}, {90, 48, 4}};

}  // namespace

TEST_CASE("int16 LUT tables: every ISA writes generic's bytes in place, in the documented layout",
          "[compute][kernels][q16]") {
  for (const Shape shape : kShapes) {
    const ExpertMatrix m = make_expert_matrix(shape.rows, shape.cols, shape.stages, false, 1300 + shape.rows);
    const std::vector<float> x = random_floats(std::size_t(shape.cols), 1301);
    const std::vector<float> lut = f32_lut(m, x);
    const int nv = m.view.n_vectors, per_vector = m.stages * m.entries;
    std::vector<float> expected = lut;
    generic().rvq_lut_to_q16(expected.data(), m.stages, m.entries, 0, nv);
    // The layout, by hand: per slot the stage maxima summed, q = round-half-even(lut * 32000 / total).
    for (int v = 0; v < nv; ++v) {
      float total = 0.0f;
      for (int s = 0; s < m.stages; ++s) {
        float mx = 0.0f;
        for (int e = 0; e < m.entries; ++e) mx = std::max(mx, std::fabs(lut[std::size_t(v) * per_vector + s * m.entries + e]));
        total += mx;
      }
      REQUIRE(scale_at(expected, per_vector, v) == total / 32000.0f);
      const float inverse = 32000.0f / total;
      for (int i = 0; i < per_vector; ++i) {
        REQUIRE(q_at(expected, per_vector, v, i) == std::nearbyint(lut[std::size_t(v) * per_vector + i] * inverse));
      }
    }
    for (const KernelTable* k : waste::kernels::supported()) {
      INFO("isa " << k->isa << " rows " << shape.rows << " stages " << shape.stages);
      std::vector<float> actual = lut;
      const int split = nv / 2;  // two calls, as the pool splits vector positions
      k->rvq_lut_to_q16(actual.data(), m.stages, m.entries, 0, split);
      k->rvq_lut_to_q16(actual.data(), m.stages, m.entries, split, nv);
      for (int v = 0; v < nv; ++v) {
        REQUIRE(std::memcmp(actual.data() + std::size_t(v) * per_vector, expected.data() + std::size_t(v) * per_vector,
                            2 * per_vector + 4) == 0);
      }
    }
  }
}

TEST_CASE("q16 apply: every ISA gives generic's bits on odd shapes and row ranges, within the bound of the f32 apply",
          "[compute][kernels][q16]") {
  for (const Shape shape : kShapes) {
    const ExpertMatrix m = make_expert_matrix(shape.rows, shape.cols, shape.stages, false, 1400 + shape.rows);
    const std::vector<float> x = random_floats(std::size_t(shape.cols), 1401);
    const std::vector<float> lut = f32_lut(m, x);
    const int nv = m.view.n_vectors, per_vector = m.stages * m.entries;
    std::vector<float> q16 = lut;
    generic().rvq_lut_to_q16(q16.data(), m.stages, m.entries, 0, nv);
    std::vector<float> expected(shape.rows), exact(shape.rows);
    generic().rvq_apply_q16(m.view, q16.data(), m.entries, expected.data(), 0, shape.rows);
    generic().rvq_apply(m.view, lut.data(), m.entries, exact.data(), 0, shape.rows);
    // Each looked-up entry is within half a step (scale_v / 2) of its f32 value.
    double half_steps = 0.0;
    for (int v = 0; v < nv; ++v) half_steps += m.stages * 0.5 * scale_at(q16, per_vector, v);
    for (int r = 0; r < shape.rows; ++r) {
      double magnitude = 0.0;  // the f32 sums' own rounding, generously
      for (int v = 0; v < nv; ++v) {
        for (int s = 0; s < m.stages; ++s) magnitude += std::fabs(lut[std::size_t(v) * per_vector + s * m.entries + m.idx[std::size_t(r) * nv + v][s]]);
      }
      const double bound = std::fabs(row_scale(m, r)) * (half_steps * 1.0001 + 1e-6 * magnitude);
      INFO("row " << r << " q16 " << expected[r] << " f32 " << exact[r] << " bound " << bound);
      REQUIRE(std::fabs(double(expected[r]) - double(exact[r])) <= bound);
    }
    for (const KernelTable* k : waste::kernels::supported()) {
      for (int begin = 0; begin < shape.rows; begin += 64) {
        for (const int end : {std::min(shape.rows, begin + 17), std::min(shape.rows, begin + 64), shape.rows}) {
          INFO("isa " << k->isa << " rows " << shape.rows << " stages " << shape.stages << " range [" << begin << ", " << end << ")");
          std::vector<float> actual(shape.rows, kUntouched);
          k->rvq_apply_q16(m.view, q16.data(), m.entries, actual.data(), begin, end);
          REQUIRE(std::memcmp(actual.data() + begin, expected.data() + begin, sizeof(float) * (end - begin)) == 0);
          for (int r = 0; r < shape.rows; ++r) {
            if (r < begin || r >= end) REQUIRE(actual[r] == kUntouched);
          }
        }
      }
    }
  }
}

TEST_CASE("q16 stage sums reach the int16 range's edge without overflowing", "[compute][kernels][q16]") {
  // Every row looks up each stage's largest entry, all of one sign: the integer stage sum is then
  // about 32000, the most a slot allows; a wrapped int16 would come out negative.
  ExpertMatrix m = make_expert_matrix(64, 64, 4, false, 1500);
  for (auto& b : m.index) b = 7;
  const int nv = m.view.n_vectors, per_vector = m.stages * m.entries;
  std::vector<float> lut(std::size_t(nv) * per_vector, 0.25f);
  for (int v = 0; v < nv; ++v) {
    for (int s = 0; s < m.stages; ++s) lut[std::size_t(v) * per_vector + s * m.entries + 7] = 3.0f + s;
  }
  std::vector<float> q16 = lut;
  generic().rvq_lut_to_q16(q16.data(), m.stages, m.entries, 0, nv);
  std::vector<float> exact(64);
  generic().rvq_apply(m.view, lut.data(), m.entries, exact.data(), 0, 64);
  for (const KernelTable* k : waste::kernels::supported()) {
    INFO("isa " << k->isa);
    std::vector<float> y(64);
    k->rvq_apply_q16(m.view, q16.data(), m.entries, y.data(), 0, 64);
    for (int r = 0; r < 64; ++r) REQUIRE(std::fabs(y[r] - exact[r]) <= 1e-4f * std::fabs(exact[r]));
  }
}

TEST_CASE("WASTE_LUT and --lut take f32 or q16 and name anything else", "[compute][q16]") {
  using waste::forward::LutMode;
  REQUIRE(waste::forward::parse_lut_mode("f32", "--lut").value() == LutMode::f32);
  REQUIRE(waste::forward::parse_lut_mode("q16", "--lut").value() == LutMode::q16);
  const auto bad = waste::forward::parse_lut_mode("q8", "WASTE_LUT");
  REQUIRE_FALSE(bad.has_value());
  REQUIRE(bad.error().message == "WASTE_LUT: 'q8' is not a LUT mode (f32 or q16)");
}

namespace waste {

TEST_CASE("The LUT mode defaults to q16 exactly where the kernel table has a vector q16 apply", "[compute][q16]") {
  using forward::LutMode;
  // The feature report itself: generic's scalar loop is no vector apply; of the tables this CPU
  // runs, the VBMI one (vpermt2w from registers) has one and the others copy generic's entry.
  // A new vector q16 apply changes the second line (and with it that ISA's default).
  REQUIRE_FALSE(kernels::has_vector_q16_apply(kernels::generic()));
  for (const KernelTable* k : kernels::supported()) {
    INFO("isa " << k->isa);
    const bool vector = kernels::has_vector_q16_apply(*k);
    CHECK(vector == (std::string_view(k->isa) == "avx512vbmi"));
    const LutMode expected = vector ? LutMode::q16 : LutMode::f32;
    CHECK(forward::default_lut_mode(*k) == expected);
    // WASTE_LUT unset or empty: the table's default.
    CHECK(forward::resolve_lut_mode(nullptr, *k).value() == expected);
    CHECK(forward::resolve_lut_mode("", *k).value() == expected);
    // Set: it wins both ways, whatever the table.
    CHECK(forward::resolve_lut_mode("f32", *k).value() == LutMode::f32);
    CHECK(forward::resolve_lut_mode("q16", *k).value() == LutMode::q16);
    for (const char* bad : {"Q16", "q16 ", "int16", "0"}) {
      const auto resolved = forward::resolve_lut_mode(bad, *k);
      REQUIRE_FALSE(resolved.has_value());
      CHECK(resolved.error().message == "WASTE_LUT: '" + std::string(bad) + "' is not a LUT mode (f32 or q16)");
    }
  }
  // The process's table: the decode path's default is the active table's.
  CHECK(forward::default_lut_mode(kernels::active()) ==
        (kernels::has_vector_q16_apply(kernels::active()) ? LutMode::q16 : LutMode::f32));
}

TEST_CASE("set_lut_mode overrides the mode and the report names who set it", "[compute][q16]") {
  using forward::LutMode;
  const LutMode before = forward::lut_mode();
  forward::set_lut_mode(LutMode::q16, "--lut");
  CHECK(forward::lut_mode() == LutMode::q16);
  CHECK(forward::lut_mode_report() == "q16 (--lut)");
  forward::set_lut_mode(LutMode::f32, "a test");
  CHECK(forward::lut_mode() == LutMode::f32);
  CHECK(forward::lut_mode_report() == "f32 (a test)");
  forward::set_lut_mode(before, "set_lut_mode");
}

}  // namespace waste

// RVQ kernels of every supported ISA against generic, bit for bit, on the shapes that stress the
// vector paths: rows not a multiple of 16 or 64, row ranges starting at any 64-row block and
// ending anywhere, more rows than one tile of the AVX-512 apply, 1-4 stages, VQ4P with a short
// last LUT block, and fp16 row scales that are subnormal, negative or use exponent 31.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include "compute/kernels/avx2.hpp"
#include "compute/kernels/kernel_impl.hpp"
#endif
#include "compute/kernels/kernels.hpp"
#include "test_kernels_fixtures.hpp"

namespace {

using waste::kernels::generic;
using waste::kernels::KernelTable;
using waste::kernels::lut_quant_blocks;
using waste::test::ExpertMatrix;
using waste::test::make_expert_matrix;
using waste::test::random_floats;

constexpr float kUntouched = -12345.0f;

bool same_bits(const float* a, const float* b, std::size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// Overwrite some row scales with fp16 values a careless vector decode gets wrong.
void plant_special_scales(ExpertMatrix& m) {
  const std::uint16_t specials[] = {0x0001, 0x03ff, 0x8200, 0xbc00, 0x7c00, 0xfbff, 0x0000, 0x8000};
  for (int r = 0; r < m.rows; r += 7) {
    const std::uint16_t h = specials[(r / 7) % 8];
    std::memcpy(m.scale_bytes.data() + 1 + 2 * r, &h, 2);
  }
}

// Row ranges the pool could hand out: begin on a block boundary, end anywhere after it.
std::vector<std::pair<int, int>> row_ranges(int rows) {
  std::vector<std::pair<int, int>> ranges{{0, rows}};
  for (int begin = 0; begin < rows; begin += 64) {
    for (int len : {1, 15, 16, 17, 64, 100, 513}) ranges.emplace_back(begin, std::min(rows, begin + len));
    ranges.emplace_back(begin, rows);
  }
  return ranges;
}

using Vq4pApply = void (*)(const waste::kernels::RvqMatrix&, const std::int8_t*, const float*, float*, int, int);
struct NamedApply {
  std::string name;
  Vq4pApply apply;
};

// Every supported table's VQ4P apply, and both of the avx512vbmi table's (it takes one by CPU
// vendor: the other must give generic's bits too) where this CPU runs them.
std::vector<NamedApply> vq4p_applies() {
  std::vector<NamedApply> applies;
  for (const KernelTable* k : waste::kernels::supported()) applies.push_back({k->isa, k->rvq_apply_vq4p});
#if defined(__x86_64__)
  if (waste::kernels::find("avx2") != nullptr) {
    applies.push_back({"avx2 gather", waste::kernels::detail::avx2_impl::rvq_apply_vq4p_gather});
    applies.push_back({"avx2 shuffle", waste::kernels::detail::avx2_impl::rvq_apply_vq4p_shuffle});
  }
  if (waste::kernels::find("avx512vbmi") != nullptr) {
    applies.push_back({"avx512vbmi planes", waste::kernels::detail::avx512vbmi_impl::rvq_apply_vq4p});
    if (__builtin_cpu_supports("avx512vnni")) {
      applies.push_back({"avx512vbmi pairs", waste::kernels::detail::avx512vbmi_impl::rvq_apply_vq4p_pairs});
    }
  }
#endif
  return applies;
}

}  // namespace

TEST_CASE("every ISA's RVQ apply is bit-identical to generic on odd shapes and row ranges",
          "[compute][kernels]") {
  struct Shape { int rows, cols, stages; };
  for (const Shape shape : {Shape{1, 24, 3}, Shape{17, 40, 3}, Shape{63, 8, 1}, Shape{129, 56, 2},
                            Shape{577, 72, 3}, Shape{1030, 32, 3}, Shape{90, 48, 4}}) {
    ExpertMatrix m = make_expert_matrix(shape.rows, shape.cols, shape.stages, false,
                                        700 + shape.rows);
    plant_special_scales(m);
    const int n_vectors = m.view.n_vectors;
    const std::vector<float> x = random_floats(static_cast<std::size_t>(shape.cols), 701);
    std::vector<float> lut(static_cast<std::size_t>(n_vectors) * m.stages * m.entries);
    generic().rvq_lut_build(x.data(), m.book_ptrs.data(), m.stages, m.entries, 8, 0, n_vectors,
                            lut.data());
    std::vector<float> expected(shape.rows);
    generic().rvq_apply(m.view, lut.data(), m.entries, expected.data(), 0, shape.rows);
    for (const KernelTable* k : waste::kernels::supported()) {
      for (const auto& [begin, end] : row_ranges(shape.rows)) {
        INFO("isa " << k->isa << " rows " << shape.rows << " stages " << shape.stages << " range ["
                    << begin << ", " << end << ")");
        std::vector<float> actual(shape.rows, kUntouched);
        k->rvq_apply(m.view, lut.data(), m.entries, actual.data(), begin, end);
        REQUIRE(same_bits(actual.data() + begin, expected.data() + begin, end - begin));
        for (int r = 0; r < shape.rows; ++r) {
          if (r < begin || r >= end) REQUIRE(actual[r] == kUntouched);
        }
      }
    }
  }
}

#if defined(__x86_64__)
TEST_CASE("the AVX2 RVQ apply gives generic's bits with gathers and with scalar loads, whichever the CPU picks",
          "[compute][kernels]") {
  if (waste::kernels::find("avx2") == nullptr) {
    WARN("no AVX2 on this CPU: nothing to check");
    return;
  }
  using waste::kernels::detail::avx2_impl::RvqLookups;
  struct Shape { int rows, cols, stages; };
  for (const Shape shape : {Shape{1, 24, 3}, Shape{17, 40, 3}, Shape{63, 8, 1}, Shape{129, 56, 2},
                            Shape{577, 72, 3}, Shape{1030, 32, 3}}) {
    ExpertMatrix m = make_expert_matrix(shape.rows, shape.cols, shape.stages, false, 900 + shape.rows);
    plant_special_scales(m);
    const int n_vectors = m.view.n_vectors;
    const std::vector<float> x = random_floats(static_cast<std::size_t>(shape.cols), 901);
    std::vector<float> lut(static_cast<std::size_t>(n_vectors) * m.stages * m.entries);
    generic().rvq_lut_build(x.data(), m.book_ptrs.data(), m.stages, m.entries, 8, 0, n_vectors, lut.data());
    std::vector<float> expected(shape.rows);
    generic().rvq_apply(m.view, lut.data(), m.entries, expected.data(), 0, shape.rows);
    for (const RvqLookups how : {RvqLookups::gather, RvqLookups::loads}) {
      for (const auto& [begin, end] : row_ranges(shape.rows)) {
        INFO((how == RvqLookups::loads ? "loads" : "gather") << " rows " << shape.rows << " stages " << shape.stages
                                                             << " range [" << begin << ", " << end << ")");
        std::vector<float> actual(shape.rows, kUntouched);
        waste::kernels::detail::avx2_impl::rvq_apply_lookups(how, m.view, lut.data(), m.entries, actual.data(),
                                                             begin, end);
        REQUIRE(same_bits(actual.data() + begin, expected.data() + begin, end - begin));
        for (int r = 0; r < shape.rows; ++r) {
          if (r < begin || r >= end) REQUIRE(actual[r] == kUntouched);
        }
      }
    }
  }
}

#endif

TEST_CASE("every ISA's VQ4P apply is bit-identical to generic on odd shapes and row ranges",
          "[compute][kernels]") {
  struct Shape { int rows, cols; };
  // 37 and 70 vector positions leave a short last LUT block (5 and 6 positions).
  for (const Shape shape : {Shape{5, 8 * 37}, Shape{33, 8 * 3}, Shape{100, 8 * 70},
                            Shape{600, 8 * 33}, Shape{1000, 8 * 65}}) {
    ExpertMatrix m = make_expert_matrix(shape.rows, shape.cols, 4, true, 800 + shape.rows);
    plant_special_scales(m);
    const int n_vectors = m.view.n_vectors;
    // Wider x so the int8 LUT uses the full [-127, 127] range.
    const std::vector<float> x = random_floats(static_cast<std::size_t>(shape.cols), 801, -4.0f, 4.0f);
    std::vector<float> lut(static_cast<std::size_t>(n_vectors) * 4 * 64);
    generic().rvq_lut_build(x.data(), m.book_ptrs.data(), 4, 64, 8, 0, n_vectors, lut.data());
    std::vector<std::int8_t> lut_q(lut.size());
    std::vector<float> scales(lut_quant_blocks(n_vectors));
    generic().rvq_lut_quantize(lut.data(), n_vectors, 4, 64, lut_q.data(), scales.data());
    std::vector<float> expected(shape.rows);
    generic().rvq_apply_vq4p(m.view, lut_q.data(), scales.data(), expected.data(), 0, shape.rows);
    for (const NamedApply& k : vq4p_applies()) {
      for (const auto& [begin, end] : row_ranges(shape.rows)) {
        INFO("apply " << k.name << " rows " << shape.rows << " range [" << begin << ", " << end << ")");
        std::vector<float> actual(shape.rows, kUntouched);
        k.apply(m.view, lut_q.data(), scales.data(), actual.data(), begin, end);
        REQUIRE(same_bits(actual.data() + begin, expected.data() + begin, end - begin));
        for (int r = 0; r < shape.rows; ++r) {
          if (r < begin || r >= end) REQUIRE(actual[r] == kUntouched);
        }
      }
    }
  }
}

// rvq_apply_vq4p_each (and the pairs kernel for several tokens, which reads each position's indices
// once for up to 4 tokens): every token's rows bit-identical to generic's one-token apply, for token
// counts that leave 1, 2 and 3 tokens after the groups of 4, and for any row range.
TEST_CASE("every ISA's VQ4P apply for several tokens gives each token generic's one-token bits", "[compute][kernels]") {
  using TokensApply = void (*)(const waste::kernels::RvqMatrix&, int, const std::int8_t* const*, const float* const*,
                               float* const*, int, int);
  struct NamedTokens {
    std::string name;
    const KernelTable* table;  // rvq_apply_vq4p_each on it, or
    TokensApply apply;         // this kernel
  };
  std::vector<NamedTokens> applies;
  for (const KernelTable* k : waste::kernels::supported()) applies.push_back({k->isa, k, nullptr});
#if defined(__x86_64__)
  if (waste::kernels::find("avx512vbmi") != nullptr && __builtin_cpu_supports("avx512vnni")) {
    applies.push_back({"avx512vbmi pairs tokens", nullptr, waste::kernels::detail::avx512vbmi_impl::rvq_apply_vq4p_pairs_tokens});
  }
#endif
  ExpertMatrix m = make_expert_matrix(300, 8 * 70, 4, true, 830);
  plant_special_scales(m);
  const int n_vectors = m.view.n_vectors;
  constexpr int kTokens = 7;
  std::vector<std::vector<std::int8_t>> lut_q(kTokens, std::vector<std::int8_t>(std::size_t(n_vectors) * 4 * 64));
  std::vector<std::vector<float>> scales(kTokens, std::vector<float>(lut_quant_blocks(n_vectors)));
  std::vector<std::vector<float>> expected(kTokens, std::vector<float>(std::size_t(m.rows)));
  for (int t = 0; t < kTokens; ++t) {
    const std::vector<float> x = random_floats(std::size_t(8 * n_vectors), 831 + t, -4.0f, 4.0f);
    std::vector<float> lut(lut_q[t].size());
    generic().rvq_lut_build(x.data(), m.book_ptrs.data(), 4, 64, 8, 0, n_vectors, lut.data());
    generic().rvq_lut_quantize(lut.data(), n_vectors, 4, 64, lut_q[t].data(), scales[t].data());
    generic().rvq_apply_vq4p(m.view, lut_q[t].data(), scales[t].data(), expected[t].data(), 0, m.rows);
  }
  for (const NamedTokens& k : applies) {
    for (int n = 1; n <= kTokens; ++n) {
      for (const auto& [begin, end] : row_ranges(m.rows)) {
        INFO("apply " << k.name << " tokens " << n << " range [" << begin << ", " << end << ")");
        std::vector<std::vector<float>> actual(std::size_t(n), std::vector<float>(std::size_t(m.rows), kUntouched));
        std::vector<const std::int8_t*> q;
        std::vector<const float*> sc;
        std::vector<float*> y;
        for (int t = 0; t < n; ++t) {
          q.push_back(lut_q[t].data());
          sc.push_back(scales[t].data());
          y.push_back(actual[std::size_t(t)].data());
        }
        if (k.table != nullptr) {
          waste::kernels::rvq_apply_vq4p_each(*k.table, m.view, n, q.data(), sc.data(), y.data(), begin, end);
        } else {
          k.apply(m.view, n, q.data(), sc.data(), y.data(), begin, end);
        }
        for (int t = 0; t < n; ++t) {
          REQUIRE(same_bits(actual[t].data() + begin, expected[t].data() + begin, std::size_t(end - begin)));
          for (int r = 0; r < m.rows; ++r) {
            if (r < begin || r >= end) REQUIRE(actual[t][r] == kUntouched);
          }
        }
      }
    }
  }
}

// The int8 sums' extremes: every entry at +127 or -127 (block sums of +-16256, the int16 bound
// generic relies on) and every index field at 63 or at 0, for the byte-permute lookups
// (avx512vbmi: bit 6 of each lookup byte picks the stage pair, so a field leaking into it would
// read the wrong stage's table).
TEST_CASE("every ISA's VQ4P apply gives generic's bits at the int8 LUT's extremes", "[compute][kernels]") {
  ExpertMatrix m = make_expert_matrix(200, 8 * 70, 4, true, 811);
  const int n_vectors = m.view.n_vectors;
  std::vector<float> scales(lut_quant_blocks(n_vectors));
  for (std::size_t b = 0; b < scales.size(); ++b) scales[b] = 0.5f + float(b);
  const std::vector<std::uint8_t> random_index = m.index;
  for (int pattern = 0; pattern < 6; ++pattern) {
    std::vector<std::int8_t> lut_q(static_cast<std::size_t>(n_vectors) * 4 * 64);
    for (std::size_t i = 0; i < lut_q.size(); ++i) {
      const int stage = int(i / 64) % 4;
      lut_q[i] = pattern % 3 == 0 ? std::int8_t{127} : pattern % 3 == 1 ? std::int8_t{-127}
                                                                         : std::int8_t(stage % 2 ? 127 : -127 + int(i % 64));
    }
    m.index = random_index;
    if (pattern >= 3) std::fill(m.index.begin(), m.index.end(), pattern == 3 ? 0xFF : 0x00);
    m.view.index = m.index.data();
    std::vector<float> expected(std::size_t(m.rows));
    generic().rvq_apply_vq4p(m.view, lut_q.data(), scales.data(), expected.data(), 0, m.rows);
    if (pattern == 0) REQUIRE(expected[0] != 0.0f);
    for (const NamedApply& k : vq4p_applies()) {
      INFO("apply " << k.name << " pattern " << pattern);
      std::vector<float> actual(std::size_t(m.rows), kUntouched);
      k.apply(m.view, lut_q.data(), scales.data(), actual.data(), 0, m.rows);
      REQUIRE(same_bits(actual.data(), expected.data(), std::size_t(m.rows)));
    }
  }
}

TEST_CASE("every ISA's RVQ LUT build is bit-identical to generic for any vector range",
          "[compute][kernels]") {
  struct Shape { int cols, stages, entries; };
  for (const Shape shape : {Shape{8 * 45, 3, 256}, Shape{8 * 7, 4, 64}, Shape{8 * 20, 1, 256},
                            Shape{8 * 9, 2, 16}}) {
    const int n_vectors = shape.cols / 8;
    std::vector<std::vector<float>> books;
    std::vector<const float*> book_ptrs;
    for (int s = 0; s < shape.stages; ++s) {
      books.push_back(random_floats(static_cast<std::size_t>(shape.entries) * 8, 900 + s));
    }
    for (const auto& b : books) book_ptrs.push_back(b.data());
    // Products that are -0 or tiny: the kernels must add them to +0 exactly as generic does.
    std::vector<float> x = random_floats(static_cast<std::size_t>(shape.cols), 910);
    x[0] = -0.0f;
    x[3] = 1e-30f;
    books[0][5] = -0.0f;
    const std::size_t lut_size = static_cast<std::size_t>(n_vectors) * shape.stages * shape.entries;
    std::vector<float> expected(lut_size);
    generic().rvq_lut_build(x.data(), book_ptrs.data(), shape.stages, shape.entries, 8, 0,
                            n_vectors, expected.data());
    for (const KernelTable* k : waste::kernels::supported()) {
      for (const auto& [begin, end] : {std::pair{0, n_vectors}, std::pair{1, 2}, std::pair{3, n_vectors},
                                       std::pair{0, n_vectors - 1}}) {
        INFO("isa " << k->isa << " entries " << shape.entries << " stages " << shape.stages
                    << " vectors [" << begin << ", " << end << ")");
        std::vector<float> lut(lut_size, kUntouched);
        k->rvq_lut_build(x.data(), book_ptrs.data(), shape.stages, shape.entries, 8, begin, end,
                         lut.data());
        const std::size_t per_vector = static_cast<std::size_t>(shape.stages) * shape.entries;
        REQUIRE(same_bits(lut.data() + begin * per_vector, expected.data() + begin * per_vector,
                          (end - begin) * per_vector));
        for (std::size_t i = 0; i < lut_size; ++i) {
          if (i < begin * per_vector || i >= end * per_vector) REQUIRE(lut[i] == kUntouched);
        }
      }
    }
  }
}

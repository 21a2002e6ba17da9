// Sampling's weights and a logprob's normaliser (kernels.hpp `exp_weights`, `sum_exp`) on every
// ISA this CPU supports: exp_weights bit for bit the C library's expf, sum_exp within its bound;
// and the sampler's picks over a real vocabulary against a sampler written here with std::exp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compute/kernels/kernels.hpp"
#include "compute/sampling/sampler.hpp"

namespace {

using waste::kernels::KernelTable;

std::vector<float> exp_weights_of(const KernelTable& table, const std::vector<float>& x, float sub, float div) {
  std::vector<float> y(x.size(), -1.0f);
  waste::kernels::exp_weights(table, x.data(), int(x.size()), sub, div, y.data());
  return y;
}

// First index where the bits differ (NaN against NaN counts as equal), or -1.
std::int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i]) &&
        !(std::isnan(a[i]) && std::isnan(b[i]))) {
      return std::int64_t(i);
    }
  }
  return -1;
}

std::vector<float> logits_like(std::size_t n, std::uint32_t seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

}  // namespace

TEST_CASE("exp_weights gives std::exp's bits on every ISA across the float range", "[compute][kernels][exp]") {
  // Every 997th float from -0 down past -104 (where expf is 0), every 997th positive up past 88.7
  // (where it overflows), and the special values.
  std::vector<float> x;
  for (std::uint32_t bits = 0x80000000u; bits <= 0xc2e00000u; bits += 997) x.push_back(std::bit_cast<float>(bits));
  for (std::uint32_t bits = 0; bits <= 0x42c00000u; bits += 997) x.push_back(std::bit_cast<float>(bits));
  for (const float v : {0.0f, -0.0f, -88.0f, 88.0f, -87.99999f, -103.27893f, -103.97208f, -103.97209f, 88.72283f,
                        88.72284f, -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                        -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::lowest()}) {
    x.push_back(v);
  }
  x.push_back(-1.5f);  // an odd length: a short last step
  std::vector<float> want(x.size());
  waste::kernels::exp_weights_reference(x.data(), int(x.size()), 0.0f, 1.0f, want.data());
  for (const KernelTable* table : waste::kernels::supported()) {
    INFO("isa " << table->isa << (table->exp_weights != nullptr ? " (vector)" : " (reference)"));
    const std::vector<float> got = exp_weights_of(*table, x, 0.0f, 1.0f);
    const std::int64_t at = first_difference(got, want);
    INFO("first difference at x = " << (at >= 0 ? x[std::size_t(at)] : 0.0f));
    REQUIRE(at == -1);
  }
}

TEST_CASE("exp_weights subtracts and divides in float as the sampler does", "[compute][kernels][exp]") {
  for (const std::size_t n : {std::size_t(1), std::size_t(15), std::size_t(17), std::size_t(163840 + 7)}) {
    const std::vector<float> logits = logits_like(n, std::uint32_t(n), 4.0f);
    const float max = *std::max_element(logits.begin(), logits.end());
    for (const float temperature : {0.8f, 1.0f, 0.3f, 1.7f, 0.01f}) {
      std::vector<float> want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = std::exp((logits[i] - max) / temperature);
      for (const KernelTable* table : waste::kernels::supported()) {
        INFO("isa " << table->isa << ", n " << n << ", temperature " << temperature);
        REQUIRE(first_difference(exp_weights_of(*table, logits, max, temperature), want) == -1);
      }
    }
  }
}

#if defined(__GLIBC__) && (defined(__x86_64__) || defined(_M_X64))
TEST_CASE("the AVX2 and AVX-512 tables take the vector exp_weights with glibc's expf", "[compute][kernels][exp]") {
  // The start-up checks (avx2_exp.cpp, avx512_exp.cpp) keep the kernel where the C library agrees:
  // glibc's does.
  for (const KernelTable* table : waste::kernels::supported()) {
    if (std::string(table->isa).starts_with("avx")) {
      INFO("isa " << table->isa);
      REQUIRE(table->exp_weights != nullptr);
      REQUIRE(table->sum_exp != nullptr);
    }
  }
}
#endif

TEST_CASE("sum_exp is within 1e-14 relative of the in-order std::exp sum", "[compute][kernels][exp]") {
  for (const std::size_t n : {std::size_t(1), std::size_t(9), std::size_t(16), std::size_t(33), std::size_t(163840)}) {
    for (const float spread : {0.5f, 4.0f, 40.0f}) {
      std::vector<float> logits = logits_like(n, std::uint32_t(n * 3 + 1), spread);
      if (n > 20) {
        logits[3] = -std::numeric_limits<float>::infinity();  // a masked token: exp 0
        logits[5] = -1e30f;
      }
      const float max = *std::max_element(logits.begin(), logits.end());
      const double want = waste::kernels::sum_exp_reference(logits.data(), std::int64_t(n), max);
      for (const KernelTable* table : waste::kernels::supported()) {
        INFO("isa " << table->isa << ", n " << n << ", spread " << spread);
        const double got = waste::kernels::sum_exp(*table, logits.data(), std::int64_t(n), max);
        REQUIRE(std::abs(got - want) <= 1e-14 * want);
      }
    }
  }
  // Every term exp(0): the count exactly.
  const std::vector<float> flat(1000, 2.5f);
  for (const KernelTable* table : waste::kernels::supported()) {
    REQUIRE(waste::kernels::sum_exp(*table, flat.data(), 1000, 2.5) == 1000.0);
  }
}

TEST_CASE("seeded sampling over a real vocabulary picks what a std::exp sampler picks", "[compute][sampler][exp]") {
  // The sampler's rule (docs: sampler.hpp) written out here with std::exp, against Sampler on the
  // active table: 300 draws over 163,840 logits at three temperatures.
  const std::vector<float> logits = logits_like(163840, 11, 3.0f);
  for (const float temperature : {0.8f, 1.0f, 0.35f}) {
    waste::Sampler sampler({.temperature = temperature, .top_p = 1.0f, .top_k = 0, .seed = 99});
    std::uint64_t state = 99;
    const float max = *std::max_element(logits.begin(), logits.end());
    std::vector<float> weight(logits.size());
    float total = 0.0f;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      weight[i] = std::exp((logits[i] - max) / temperature);
      total += weight[i];
    }
    for (int draw = 0; draw < 300; ++draw) {
      const float target = waste::Sampler::next_uniform(state) * total;
      float running = 0.0f;
      int want = int(logits.size()) - 1;
      for (std::size_t i = 0; i < logits.size(); ++i) {
        running += weight[i];
        if (running >= target) {
          want = int(i);
          break;
        }
      }
      INFO("temperature " << temperature << ", draw " << draw);
      REQUIRE(sampler.sample(logits) == want);
    }
  }
}

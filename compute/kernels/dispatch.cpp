// Picks the KernelTable once per process (Highway's "hoist the dispatch" rule): the best ISA this
// CPU supports, unless WASTE_FORCE_ISA=generic|avx2|avx512|avx512vbmi|neon names another supported one.
#include <array>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

#include "compute/kernels/dequantize.hpp"
#include "compute/kernels/kernel_impl.hpp"
#include "shared/fp16.hpp"

namespace waste::kernels {
namespace {

struct SupportedTables {
  std::array<const KernelTable*, 5> tables{};
  std::size_t count = 0;
};

SupportedTables detect() {
  SupportedTables found;
  found.tables[found.count++] = &detail::generic_table();
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) found.tables[found.count++] = &detail::avx2_table();
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    found.tables[found.count++] = &detail::avx512_table();
    // VQ4P lookups as byte permutes (vpermb) from registers, 64 rows per lookup.
    if (__builtin_cpu_supports("avx512vbmi")) {
      found.tables[found.count++] = &detail::avx512vbmi_table();
    }
  }
#elif defined(__aarch64__)
  found.tables[found.count++] = &detail::neon_table();  // NEON is in the AArch64 base ISA
#endif
  return found;
}

const SupportedTables& supported_tables() {
  static const SupportedTables tables = detect();
  return tables;
}

const KernelTable& choose() {
  const SupportedTables& all = supported_tables();
  const KernelTable* best = all.tables[all.count - 1];
  if (const char* forced = std::getenv("WASTE_FORCE_ISA"); forced != nullptr && *forced != '\0') {
    if (const KernelTable* table = find(forced)) {
      spdlog::info("kernels: ISA {} (forced by WASTE_FORCE_ISA)", table->isa);
      return *table;
    }
    spdlog::warn("kernels: WASTE_FORCE_ISA={} is not supported on this CPU, using {}", forced,
                 best->isa);
    return *best;
  }
  spdlog::info("kernels: ISA {}", best->isa);
  return *best;
}

}  // namespace

const KernelTable& active() {
  static const KernelTable& table = choose();
  return table;
}

const KernelTable& generic() { return detail::generic_table(); }

std::span<const KernelTable* const> supported() {
  const SupportedTables& all = supported_tables();
  return {all.tables.data(), all.count};
}

const KernelTable* find(std::string_view isa) {
  for (const KernelTable* table : supported()) {
    if (isa == table->isa) return table;
  }
  return nullptr;
}

bool has_vector_q16_apply(const KernelTable& table) {
  // Tables without a vector apply of their own copy generic's entry (avx2.cpp, avx512.cpp, neon.cpp).
  return table.rvq_apply_q16 != generic().rvq_apply_q16;
}

void weighted_rows_reference(const QuantMatrix& w, std::int64_t row0, int n_rows, const float* x,
                             std::int64_t x_stride, int n, float* y, std::int64_t y_stride) {
  thread_local std::vector<float> row;  // each row dequantised once for every token
  row.resize(std::size_t(w.cols));
  for (int i = 0; i < n_rows; ++i) {
    dequantize_row(w, row0 + i, row.data());
    for (int t = 0; t < n; ++t) {
      const float xi = x[std::int64_t(t) * x_stride + i];
      float* yt = y + std::int64_t(t) * y_stride;
      for (std::int64_t c = 0; c < w.cols; ++c) yt[c] = yt[c] + xi * row[std::size_t(c)];
    }
  }
}

void weighted_rows(const KernelTable& table, const QuantMatrix& w, std::int64_t row0, int n_rows, const float* x,
                   std::int64_t x_stride, int n, float* y, std::int64_t y_stride) {
  const bool takes = (w.fmt == 2 || w.fmt == 3) && w.group % 64 == 0 && w.cols % 64 == 0 && w.scales != nullptr;
  if (table.weighted_rows != nullptr && takes) {
    table.weighted_rows(w, row0, n_rows, x, x_stride, n, y, y_stride);
    return;
  }
  weighted_rows_reference(w, row0, n_rows, x, x_stride, n, y, y_stride);
}

void exp_weights_reference(const float* x, int n, float sub, float div, float* y) {
  for (int i = 0; i < n; ++i) y[i] = std::exp((x[i] - sub) / div);
}

void exp_weights(const KernelTable& table, const float* x, int n, float sub, float div, float* y) {
  if (table.exp_weights != nullptr) {
    table.exp_weights(x, n, sub, div, y);
    return;
  }
  exp_weights_reference(x, n, sub, div, y);
}

double sum_exp_reference(const float* x, std::int64_t n, double sub) {
  double total = 0;
  for (std::int64_t i = 0; i < n; ++i) total += std::exp(double(x[i]) - sub);
  return total;
}

double sum_exp(const KernelTable& table, const float* x, std::int64_t n, double sub) {
  return table.sum_exp != nullptr ? table.sum_exp(x, n, sub) : sum_exp_reference(x, n, sub);
}

void rvq_apply_vq4p_each(const KernelTable& table, const RvqMatrix& m, int n, const std::int8_t* const* lut_q,
                         const float* const* block_scales, float* const* y, int row_begin, int row_end) {
  if (table.rvq_apply_vq4p_tokens != nullptr) {
    table.rvq_apply_vq4p_tokens(m, n, lut_q, block_scales, y, row_begin, row_end);
    return;
  }
  for (int t = 0; t < n; ++t) table.rvq_apply_vq4p(m, lut_q[t], block_scales[t], y[t], row_begin, row_end);
}

}  // namespace waste::kernels

// Trunk products with int8 activations: prompt tokens' path, on by default (WASTE_PREFILL_INT8,
// compute/forward/int8_mode.hpp). Not bit-identical to `matmul`: each token's input is quantised
// per group of 128 columns to int8 (scale = max |x| / 127, round to nearest), which bounds the error
// of output r by sum_c |W[r][c]| * scale_{t,g(c)} / 2 (plus f32 rounding); docs/QUALITY.md has its
// measured cost. Q4G weights (4-bit values q in 0..15, weight (q - 8) * fp16 scale per group) and
// Q8G weights (int8 values q, weight q * fp16 scale per group).
//
// Order, the same on every ISA (the vector kernel is tested bit-equal to generic): per (row, token)
// acc = 0; per group g ascending: i = sum_c q[c] * xq[c] (int32, exact), then for Q4G
// acc = fma(float(i) + float(-8 * sum_xq_g), fp16(scale_w[r][g]) * scale_x[t][g], acc), for Q8G
// acc = fma(float(i), fp16(scale_w[r][g]) * scale_x[t][g], acc). (The VNNI kernel multiplies Q8G's
// codes offset by 128 as unsigned bytes and subtracts 128 * sum_xq_g: every term is an integer
// below 2^24, so float(i) is what it gets.)
#pragma once

#include <cstdint>
#include <vector>

#include "compute/kernels/kernels.hpp"

namespace waste::kernels {

inline constexpr int kInt8Group = 128;

// n tokens of one input, quantised per group of kInt8Group columns.
struct Int8Acts {
  std::vector<std::int8_t> q;       // n x cols
  std::vector<float> scale;         // n x groups
  std::vector<std::int32_t> sum;    // n x groups: sum of the group's q
  std::int64_t cols = 0;
  int groups = 0;
  int n = 0;
};

// x_t = x + t * x_stride, cols a multiple of kInt8Group. Reuses out's storage.
void quantize_acts(const float* x, std::int64_t x_stride, int n, std::int64_t cols, Int8Acts& out);

// Whether w can take the int8 product (Q4G or Q8G, group 128, cols a multiple of 128).
bool int8_matmul_supports(const QuantMatrix& w);

// y_t[r] for the tokens of a, rows [row_begin, row_end) (any range), y_t = y + t * y_stride.
using MatmulI8Fn = void (*)(const QuantMatrix& w, const Int8Acts& a, float* y, std::int64_t y_stride,
                            std::int64_t row_begin, std::int64_t row_end);

// The scalar reference.
void matmul_i8_generic(const QuantMatrix& w, const Int8Acts& a, float* y, std::int64_t y_stride,
                       std::int64_t row_begin, std::int64_t row_end);
// The product for this CPU, chosen once: AVX-512 VNNI (`vpdpbusd`) where the active kernel table is
// avx512 or avx512vbmi and the CPU reports avx512vnni, else the reference.
MatmulI8Fn matmul_i8();
// Whether matmul_i8() is the vector kernel (tests).
bool matmul_i8_is_vector();

namespace detail {
// compute/kernels/avx512vnni_matmul.cpp (x86-64 builds only).
void matmul_i8_avx512vnni(const QuantMatrix& w, const Int8Acts& a, float* y, std::int64_t y_stride,
                          std::int64_t row_begin, std::int64_t row_end);
}  // namespace detail

}  // namespace waste::kernels

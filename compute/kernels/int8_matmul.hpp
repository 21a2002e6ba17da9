// Trunk products with int8 activations: prompt tokens' path, on by default (WASTE_PREFILL_INT8,
// compute/forward/int8_mode.hpp). Not bit-identical to `matmul`: each token's input is quantised
// per group of 128 columns to int8 (scale = max |x| / 127, round to nearest), which bounds the error
// of output r by sum_c |W[r][c]| * scale_{t,g(c)} / 2 (plus f32 rounding); docs/QUALITY.md has its
// measured cost. Q4G weights (4-bit values q in 0..15, weight (q - 8) * fp16 scale per group),
// Q8G weights (int8 values q, weight q * fp16 scale per group) and Q6P weights (below).
//
// Q6P (kFmtQ6P) is a run-time layout, never written to a container: the decode head's 6-bit copy
// (compute/model/decode_head.hpp). Codes u in 0..63, weight (u - 32) * fp16 scale per group of 128.
// A row of G groups is 96 G bytes: first every group's codes' low 4 bits, 64 bytes a group in Q4G's
// order (byte i: column 2i in the low nibble, 2i + 1 in the high one), then every group's high 2
// bits, 32 bytes a group at 64 G + 32 g: two planes of 16 bytes, even columns first: column 2i
// (plane 0) or 2i + 1 (plane 1) has its high bits in bits 2k, 2k + 1 of the plane's byte j, where
// i = 16k + j. (The low bits are Q4G's, aligned alike; a 128-bit lane k of them meets one 16-byte
// plane shifted by 2k: the vector kernel's unpack is a shift, a mask and a merge.)
//
// Order, the same on every ISA (the vector kernel is tested bit-equal to generic): per (row, token)
// acc = 0; per group g ascending: i = sum_c q[c] * xq[c] (int32, exact), then for Q4G
// acc = fma(float(i) + float(-8 * sum_xq_g), fp16(scale_w[r][g]) * scale_x[t][g], acc), for Q8G
// acc = fma(float(i), fp16(scale_w[r][g]) * scale_x[t][g], acc), for Q6P as Q4G with -32 for -8
// (i < 2^21: float(i) is exact, as is the sum). (The VNNI kernel multiplies Q8G's
// codes offset by 128 as unsigned bytes and subtracts 128 * sum_xq_g: every term is an integer
// below 2^24, so float(i) is what it gets.)
#pragma once

#include <cstdint>
#include <vector>

#include "compute/kernels/kernels.hpp"

namespace waste::kernels {

inline constexpr int kInt8Group = 128;
inline constexpr std::uint8_t kFmtQ6P = 64;     // QuantMatrix::fmt of the run-time 6-bit layout
inline constexpr int kQ6PGroupBytes = 96;        // its bytes per row and group: 64 low bits, 32 high
// Where a Q6P row's group g keeps its low nibbles and its two high-bit planes (byte offsets in the row).
constexpr std::int64_t q6p_low_offset(int g) { return std::int64_t(g) * 64; }
constexpr std::int64_t q6p_planes_offset(int groups, int g) { return std::int64_t(groups) * 64 + std::int64_t(g) * 32; }

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

// Whether w can take the int8 product (Q4G, Q8G or Q6P, group 128, cols a multiple of 128).
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

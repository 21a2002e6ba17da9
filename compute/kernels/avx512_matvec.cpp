// AVX-512 (F/BW/VL/DQ) trunk matvec and matmul: 16-lane decoders for the tile driver in
// matmul_tiles.hpp (summation order and tiling are documented there). Agrees with generic within
// 1e-6 relative (FMA, per-lane partial sums); matmul gives each token matvec's bits.
// GCC 12 flags its own _mm512_undefined_* inside the widening intrinsics (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

#include "shared/fp16.hpp"

#include "compute/kernels/avx512_common.hpp"
#include "compute/kernels/kernel_impl.hpp"
#include "compute/kernels/matmul_tiles.hpp"

namespace waste::kernels::detail::avx512_impl {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16;
  // One token: 4 rows x 2 groups in flight (8 FMA chains), the next row tile prefetched into L2
  // (8 rows x 1 group with an L1 prefetch streamed the lm_head matvec ~14 % slower: docs/LEARNED.md).
  static constexpr int kMatvecRows = 4;
  static constexpr int kMatvecGroups = 2;
  static constexpr int kMatvecPrefetchTiles = 1;
  static constexpr int kTileRows = 4;     // 4 rows x 4 tokens = 16 partial sums in registers
  static constexpr int kTileTokens = 4;
  static constexpr int kBlockRows = 32;   // rows whose weights stay in L2 across token tiles

  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V set1(float v) { return _mm512_set1_ps(v); }
  static void prefetch(std::uintptr_t a) { _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0); }
  static void prefetch_matvec(std::uintptr_t a) { _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T1); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float hsum(V v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 d = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
  }

  // The v0 fp16 decode, 16 lanes at once (avx512_common.hpp).
  static void decode_scales(const std::uint16_t* src, int count, float* dst) {
    _mm512_storeu_ps(dst, avx512_common::fp16x16_to_f32(src, count));
  }

  struct F32 {
    static constexpr int kStepBytes = 128;
    static constexpr bool kGrouped = false, kPaired = false;
    static constexpr int kOffset = 0;
    static void decode(const std::uint8_t* row, std::int64_t s, V w[2]) {
      const float* p = reinterpret_cast<const float*>(row) + s * 32;
      w[0] = _mm512_loadu_ps(p);
      w[1] = _mm512_loadu_ps(p + 16);
    }
    // The last step of a row: masked loads, so nothing past the row is read.
    static void decode_tail(const std::uint8_t* row, std::int64_t s, int valid, V w[2]) {
      const float* p = reinterpret_cast<const float*>(row) + s * 32;
      const auto lanes = [](int k) {
        return static_cast<__mmask16>(k >= 16 ? 0xffffu : k <= 0 ? 0u : (1u << k) - 1u);
      };
      w[0] = _mm512_maskz_loadu_ps(lanes(valid), p);
      w[1] = _mm512_maskz_loadu_ps(lanes(valid - 16), p + 16);
    }
  };

  struct Q8 {
    static constexpr int kStepBytes = 32;
    static constexpr bool kGrouped = true, kPaired = false;
    static constexpr int kOffset = 0;
    static void decode(const std::uint8_t* row, std::int64_t s, V w[2]) {
      const std::uint8_t* p = row + s * 32;
      w[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
      w[1] = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
    }
  };

  // Nibbles 0..15 as they are; the -8 is folded into the per-group init (-8 * sum of x).
  struct Q4 {
    static constexpr int kStepBytes = 16;
    static constexpr bool kGrouped = true, kPaired = true;
    static constexpr int kOffset = 8;
    static void decode(const std::uint8_t* row, std::int64_t s, V w[2]) {
      const __m512i bytes =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + s * 16)));
      w[0] = _mm512_cvtepi32_ps(_mm512_and_si512(bytes, _mm512_set1_epi32(15)));
      w[1] = _mm512_cvtepi32_ps(_mm512_srli_epi32(bytes, 4));
    }
  };

  // 16 codes from 6 bytes: each dword lane takes the two bytes holding its 3 bits, shifts, masks.
  struct Q3 {
    static constexpr int kStepBytes = 12;
    static constexpr bool kGrouped = true, kPaired = false;
    static constexpr int kOffset = 0;
    static __m512 decode16(const std::uint8_t* p) {
      // 7 bytes (the last one may be the row's guard byte), never more.
      const __m512i bytes = _mm512_broadcast_i32x4(_mm_maskz_loadu_epi8(0x7f, p));
      const __m512i pairs = _mm512_shuffle_epi8(bytes, pair_index());
      const __m512i codes = _mm512_and_si512(_mm512_srlv_epi32(pairs, bit_shift()), _mm512_set1_epi32(7));
      return _mm512_cvtepi32_ps(_mm512_sub_epi32(codes, _mm512_set1_epi32(4)));
    }
    static __m512i pair_index() {
      // Lane i (in its 128-bit quarter) reads bytes (3i)/8 and (3i)/8 + 1.
      alignas(64) static constexpr auto kIndex = [] {
        struct { std::int8_t b[64]; } idx{};
        for (int i = 0; i < 16; ++i) {
          const int byte = 3 * i / 8;
          idx.b[4 * i] = static_cast<std::int8_t>(byte);
          idx.b[4 * i + 1] = static_cast<std::int8_t>(byte + 1);
          idx.b[4 * i + 2] = -128;
          idx.b[4 * i + 3] = -128;
        }
        return idx;
      }();
      return _mm512_load_si512(kIndex.b);
    }
    static __m512i bit_shift() {
      return _mm512_setr_epi32(0, 3, 6, 1, 4, 7, 2, 5, 0, 3, 6, 1, 4, 7, 2, 5);
    }
    static void decode(const std::uint8_t* row, std::int64_t s, V w[2]) {
      w[0] = decode16(row + s * 12);
      w[1] = decode16(row + s * 12 + 6);
    }
  };
};

}  // namespace

namespace {

// 64 columns [c, c + 64) of a row, dequantised exactly (q * scale), as four vectors: for Q4G the
// even columns c, c+2, ..., c+30 | c+32, ..., c+62, then the odd ones (the stored nibble order);
// for Q8G the natural order.
inline void dequant64(const std::uint8_t* row, std::uint8_t fmt, std::int64_t c, __m512 scale, __m512 v[4]) {
  if (fmt == 3) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c / 2));
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i lo = _mm256_and_si256(b, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
    const __m512i eight = _mm512_set1_epi32(8);
    const __m512i q[4] = {_mm512_cvtepu8_epi32(_mm256_castsi256_si128(lo)), _mm512_cvtepu8_epi32(_mm256_extracti128_si256(lo, 1)),
                          _mm512_cvtepu8_epi32(_mm256_castsi256_si128(hi)), _mm512_cvtepu8_epi32(_mm256_extracti128_si256(hi, 1))};
    for (int k = 0; k < 4; ++k) v[k] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q[k], eight)), scale);
  } else {
    for (int k = 0; k < 4; ++k) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c + 16 * k));
      v[k] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), scale);
    }
  }
}

// y's 64 columns in dequant64's order, and back.
inline void gather64(const float* y, std::uint8_t fmt, __m512 v[4]) {
  const __m512 a = _mm512_loadu_ps(y), b = _mm512_loadu_ps(y + 16), c = _mm512_loadu_ps(y + 32), d = _mm512_loadu_ps(y + 48);
  if (fmt != 3) {
    v[0] = a, v[1] = b, v[2] = c, v[3] = d;
    return;
  }
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  v[0] = _mm512_permutex2var_ps(a, even, b);
  v[1] = _mm512_permutex2var_ps(c, even, d);
  v[2] = _mm512_permutex2var_ps(a, odd, b);
  v[3] = _mm512_permutex2var_ps(c, odd, d);
}
inline void scatter64(const __m512 v[4], std::uint8_t fmt, float* y) {
  if (fmt != 3) {
    for (int k = 0; k < 4; ++k) _mm512_storeu_ps(y + 16 * k, v[k]);
    return;
  }
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
  _mm512_storeu_ps(y, _mm512_permutex2var_ps(v[0], lo, v[2]));
  _mm512_storeu_ps(y + 16, _mm512_permutex2var_ps(v[0], hi, v[2]));
  _mm512_storeu_ps(y + 32, _mm512_permutex2var_ps(v[1], lo, v[3]));
  _mm512_storeu_ps(y + 48, _mm512_permutex2var_ps(v[1], hi, v[3]));
}

}  // namespace

void weighted_rows(const QuantMatrix& w, std::int64_t row0, int n_rows, const float* x, std::int64_t x_stride, int n,
                   float* y, std::int64_t y_stride) {
  const std::int64_t n_groups = (w.cols + w.group - 1) / w.group;
  for (std::int64_t c = 0; c < w.cols; c += 64) {
    const std::int64_t g = c / w.group;
    for (int t = 0; t < n; ++t) {
      // One token's 64 sums stay in registers over every row.
      float* yt = y + std::int64_t(t) * y_stride + c;
      const float* xt = x + std::int64_t(t) * x_stride;
      __m512 acc[4];
      gather64(yt, w.fmt, acc);
      for (int i = 0; i < n_rows; ++i) {
        const std::int64_t row = row0 + i;
        std::uint16_t s16;
        std::memcpy(&s16, w.scales + row * n_groups + g, sizeof s16);
        __m512 v[4];
        dequant64(w.payload + row * w.row_stride, w.fmt, c, _mm512_set1_ps(fp16_to_f32(s16)), v);
        const __m512 xi = _mm512_set1_ps(xt[i]);
        for (int k = 0; k < 4; ++k) acc[k] = _mm512_add_ps(acc[k], _mm512_mul_ps(xi, v[k]));
      }
      scatter64(acc, w.fmt, yt);
    }
  }
}

void matmul(const QuantMatrix& w, const float* x, std::int64_t x_stride, int n, float* y,
            std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end) {
  matmul_tiles::matmul<Avx512>(w, x, x_stride, n, y, y_stride, row_begin, row_end);
}

void matvec(const QuantMatrix& w, const float* x, float* y, std::int64_t row_begin,
            std::int64_t row_end) {
  matmul_tiles::matmul<Avx512>(w, x, 0, 1, y, 0, row_begin, row_end);
}

}  // namespace waste::kernels::detail::avx512_impl

// AVX2 + FMA trunk matvec and matmul: 8-lane decoders for the tile driver in matmul_tiles.hpp
// (summation order and tiling are documented there). Agrees with generic within 1e-6 relative
// (FMA, per-lane partial sums); matmul gives each token matvec's bits.
#include <immintrin.h>

#include <cstring>

#include "compute/kernels/avx2.hpp"
#include "compute/kernels/avx2_common.hpp"
#include "compute/kernels/kernel_impl.hpp"
#include "compute/kernels/matmul_tiles.hpp"

namespace waste::kernels::detail::avx2_impl {
namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kMatvecRows = 2;   // rows in flight for one token
  static constexpr int kTileRows = 2;     // 2 rows x 4 tokens: 8 partial sums of 16 registers
  static constexpr int kTileTokens = 4;
  static constexpr int kBlockRows = 32;   // rows whose weights stay in L2 across token tiles

  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V set1(float v) { return _mm256_set1_ps(v); }
  static void prefetch(std::uintptr_t a) { _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float hsum(V v) { return avx2_common::hsum(v); }

  static void decode_scales(const std::uint16_t* src, int count, float* dst) {
    avx2_common::decode_scales(src, count, dst);
  }

  struct F32 {
    static constexpr int kStepBytes = 64;
    static constexpr bool kGrouped = false, kPaired = false;
    static constexpr int kOffset = 0;
    static void decode(const std::uint8_t* row, std::int64_t s, V w[2]) {
      const float* p = reinterpret_cast<const float*>(row) + s * 16;
      w[0] = _mm256_loadu_ps(p);
      w[1] = _mm256_loadu_ps(p + 8);
    }
    // The last step of a row: masked loads, so nothing past the row is read.
    static void decode_tail(const std::uint8_t* row, std::int64_t s, int valid, V w[2]) {
      const float* p = reinterpret_cast<const float*>(row) + s * 16;
      const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      w[0] = _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), lane));
      w[1] = _mm256_maskload_ps(p + 8, _mm256_cmpgt_epi32(_mm256_set1_epi32(valid - 8), lane));
    }
  };

  // 32 codes per 32-byte load: byte j of every 32-bit lane moved to the lane's top byte (a shift
  // left, then a mask) converts to code * 2^24 exactly, so no sign extension is needed; the 2^-24
  // goes into the group scale. Vector j, lane e holds column 4e + j of the step. The 2^24 leaves
  // the partial sums finite for |x| < 2^80. On the Zen 1 EPYC the int -> float conversion bounds
  // this loop; the shifts keep the shuffle pipes free (docs/LEARNED.md: +8% over vpmovsxbd per
  // 8 codes in isolation, a few percent in the engine).
  struct Q8 {
    static constexpr int kStepBytes = 32;
    static constexpr int kVecs = 4;
    static constexpr float kScaleMul = 0x1p-24f;
    static constexpr bool kGrouped = true, kPaired = false;
    static constexpr int kOffset = 0;
    static constexpr int column(int i) { return 4 * (i % 8) + i / 8; }
    static void decode(const std::uint8_t* row, std::int64_t s, V w[4]) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + s * 32));
      const __m256i top = _mm256_set1_epi32(static_cast<int>(0xff000000u));
      w[0] = _mm256_cvtepi32_ps(_mm256_slli_epi32(v, 24));
      w[1] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_slli_epi32(v, 16), top));
      w[2] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_slli_epi32(v, 8), top));
      w[3] = _mm256_cvtepi32_ps(_mm256_and_si256(v, top));
    }
  };

  // Groups that are a multiple of 16 but not of 32 columns: 8 codes per sign extension.
  struct Q8Narrow {
    static constexpr int kStepBytes = 16;
    static constexpr bool kGrouped = true, kPaired = false;
    static constexpr int kOffset = 0;
    static void decode(const std::uint8_t* row, std::int64_t s, V w[2]) {
      const std::uint8_t* p = row + s * 16;
      w[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
      w[1] = _mm256_cvtepi32_ps(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8))));
    }
  };

  // Nibbles 0..15 as they are; the -8 is folded into the per-group init (-8 * sum of x).
  struct Q4 {
    static constexpr int kStepBytes = 8;
    static constexpr bool kGrouped = true, kPaired = true;
    static constexpr int kOffset = 8;
    static void decode(const std::uint8_t* row, std::int64_t s, V w[2]) {
      const __m256i bytes =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + s * 8)));
      w[0] = _mm256_cvtepi32_ps(_mm256_and_si256(bytes, _mm256_set1_epi32(15)));
      w[1] = _mm256_cvtepi32_ps(_mm256_srli_epi32(bytes, 4));
    }
  };

  // 8 codes from 3 bytes; the 4-byte read stays in the row thanks to its guard byte.
  struct Q3 {
    static constexpr int kStepBytes = 6;
    static constexpr bool kGrouped = true, kPaired = false;
    static constexpr int kOffset = 0;
    static __m256 decode8(const std::uint8_t* p) {
      std::uint32_t word;
      std::memcpy(&word, p, 4);
      const __m256i shifts = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
      const __m256i codes = _mm256_and_si256(
          _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shifts), _mm256_set1_epi32(7));
      return _mm256_cvtepi32_ps(_mm256_sub_epi32(codes, _mm256_set1_epi32(4)));
    }
    static void decode(const std::uint8_t* row, std::int64_t s, V w[2]) {
      w[0] = decode8(row + s * 6);
      w[1] = decode8(row + s * 6 + 3);
    }
  };
};

}  // namespace

void matmul(const QuantMatrix& w, const float* x, std::int64_t x_stride, int n, float* y,
            std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end) {
  matmul_tiles::matmul<Avx2>(w, x, x_stride, n, y, y_stride, row_begin, row_end);
}

void matvec(const QuantMatrix& w, const float* x, float* y, std::int64_t row_begin,
            std::int64_t row_end) {
  matmul_tiles::matmul<Avx2>(w, x, 0, 1, y, 0, row_begin, row_end);
}

}  // namespace waste::kernels::detail::avx2_impl

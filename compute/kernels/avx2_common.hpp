// AVX2 building blocks shared by avx2.cpp and avx512.cpp (both are compiled with -mavx2 -mfma).
// Include only from those files.
#pragma once

#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>

namespace waste::kernels::detail::avx2_common {

// The v0 fp16 decode (subnormals kept, exponent 31 an ordinary exponent), 8 lanes at once.
inline __m256 fp16x8_to_f32(__m128i halves) {
  const __m256i h = _mm256_cvtepu16_epi32(halves);
  const __m256i normal = _mm256_add_epi32(
      _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7fff)), 13),
      _mm256_set1_epi32(112 << 23));
  const __m256 sub = _mm256_mul_ps(
      _mm256_cvtepi32_ps(_mm256_and_si256(h, _mm256_set1_epi32(0x3ff))), _mm256_set1_ps(0x1p-24f));
  const __m256i is_sub =
      _mm256_cmpeq_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7c00)), _mm256_setzero_si256());
  const __m256 magnitude =
      _mm256_blendv_ps(_mm256_castsi256_ps(normal), sub, _mm256_castsi256_ps(is_sub));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x8000)), 16);
  return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(magnitude), sign));
}

// Up to 16 fp16 group scales (possibly unaligned) to f32.
inline void decode_scales(const std::uint16_t* src, int count, float* dst) {
  alignas(32) std::uint16_t h[16] = {};
  std::memcpy(h, src, static_cast<std::size_t>(count) * 2);
  _mm256_storeu_ps(dst, fp16x8_to_f32(_mm_load_si128(reinterpret_cast<const __m128i*>(h))));
  if (count > 8) _mm256_storeu_ps(dst + 8, fp16x8_to_f32(_mm_load_si128(reinterpret_cast<const __m128i*>(h + 8))));
}

inline float hsum(__m256 v) {
  const __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 shuf = _mm_movehdup_ps(lo);
  const __m128 sums = _mm_add_ps(lo, shuf);
  return _mm_cvtss_f32(_mm_add_ss(sums, _mm_movehl_ps(shuf, sums)));
}

// Shuffle masks that pull stage s's byte of 8 consecutive rows out of their runs of S bytes:
// row k's byte sits at k*S + s. lo covers bytes 0..15 of the 8 runs, hi bytes 16..23.
template <int S>
struct RunMasks {
  std::array<std::array<std::int8_t, 16>, S> lo{};
  std::array<std::array<std::int8_t, 16>, S> hi{};
  constexpr RunMasks() {
    for (int s = 0; s < S; ++s) {
      for (int k = 0; k < 16; ++k) {
        const int byte = k * S + s;
        lo[s][k] = (k < 8 && byte < 16) ? static_cast<std::int8_t>(byte) : std::int8_t{-128};
        hi[s][k] = (k < 8 && byte >= 16) ? static_cast<std::int8_t>(byte - 16) : std::int8_t{-128};
      }
    }
  }
};

// Stage bytes of 8 consecutive rows (runs of S bytes at p) widened to int32 lanes.
template <int S>
inline void load_runs(const std::uint8_t* p, __m256i out[S]) {
  static constexpr RunMasks<S> kMasks{};
  if constexpr (S == 1) {
    out[0] = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  } else {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i hi = S == 3 ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 16))
                              : _mm_setzero_si128();
    for (int s = 0; s < S; ++s) {
      __m128i bytes = _mm_shuffle_epi8(
          lo, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMasks.lo[s].data())));
      if constexpr (S == 3) {
        bytes = _mm_or_si128(bytes, _mm_shuffle_epi8(hi, _mm_loadu_si128(reinterpret_cast<const __m128i*>(
                                                             kMasks.hi[s].data()))));
      }
      out[s] = _mm256_cvtepu8_epi32(bytes);
    }
  }
}

// Transpose 8 rows of 8 floats in place (row i lane j -> row j lane i).
inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]);
  const __m256 t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]);
  const __m256 t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]);
  const __m256 t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]);
  const __m256 t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44);
  const __m256 u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44);
  const __m256 u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44);
  const __m256 u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44);
  const __m256 u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

}  // namespace waste::kernels::detail::avx2_common

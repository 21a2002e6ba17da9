// AVX-512 building blocks shared by avx512_matvec.cpp and avx512_rvq.cpp (both compiled with the
// AVX-512 F/BW/VL/DQ flags) and avx512vnni_matmul.cpp. Include only from AVX-512 files.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace waste::kernels::detail::avx512_common {

// `count` (0..16) fp16 values at src (any alignment) decoded exactly like fp16_to_f32:
// subnormals kept, exponent 31 an ordinary exponent; lanes past count are 0.
//   normal = (h & 0x7fff) << 13 + (112 << 23);  subnormal = mantissa * 2^-24 (exact in f32)
inline __m512 fp16x16_to_f32(const void* src, int count) {
  const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1u);
  const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, src));
  const __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(0x7fff)), 13),
                                          _mm512_set1_epi32(112 << 23));
  const __m512 sub =
      _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(h, _mm512_set1_epi32(0x3ff))), _mm512_set1_ps(0x1p-24f));
  const __mmask16 is_sub = _mm512_testn_epi32_mask(h, _mm512_set1_epi32(0x7c00));
  const __m512 magnitude = _mm512_mask_blend_ps(is_sub, _mm512_castsi512_ps(normal), sub);
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(0x8000)), 16);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(magnitude), sign));
}

}  // namespace waste::kernels::detail::avx512_common

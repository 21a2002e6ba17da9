// AVX-512 KDA head step (kernels.hpp `kda_head_step`) for head dims that are multiples of 16 up to
// 256: the output accumulator lives in registers across the state's rows, and the decayed state is
// not stored between the two passes (pass 2 recomputes row * decay, the same rounded product), so
// the state is read twice and written once. Per element the same operations in the same order as the
// AVX2 kernel (FMA where it uses FMA), so the two give the same bits; other dims take the AVX2 one.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "compute/kernels/avx2.hpp"
#include "compute/kernels/kernel_impl.hpp"

namespace waste::kernels::detail::avx512_impl {
namespace {

template <int V>  // D = 16 * V
void head_step(float* S, const float* q, const float* k, const float* v, const float* g, float beta, float* o) {
  constexpr int D = 16 * V;
  __m512 acc[V];
  for (int b = 0; b < V; ++b) acc[b] = _mm512_setzero_ps();
  alignas(64) float decay[D];
  for (int i = 0; i < D; ++i) decay[i] = std::exp(g[i]);
  // u = (decayed S)^T k
  for (int i = 0; i < D; ++i) {
    const float* row = S + std::int64_t(i) * D;
    const __m512 vdecay = _mm512_set1_ps(decay[i]), vk = _mm512_set1_ps(k[i]);
    for (int b = 0; b < V; ++b) {
      acc[b] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(row + 16 * b), vdecay), vk, acc[b]);
    }
  }
  __m512 delta[V];
  const __m512 vbeta = _mm512_set1_ps(beta);
  for (int b = 0; b < V; ++b) {
    delta[b] = _mm512_mul_ps(vbeta, _mm512_sub_ps(_mm512_loadu_ps(v + 16 * b), acc[b]));
    acc[b] = _mm512_setzero_ps();
  }
  // S = decayed S + k delta^T;  o = S^T q
  for (int i = 0; i < D; ++i) {
    float* row = S + std::int64_t(i) * D;
    const __m512 vdecay = _mm512_set1_ps(decay[i]), vk = _mm512_set1_ps(k[i]), vq = _mm512_set1_ps(q[i]);
    for (int b = 0; b < V; ++b) {
      const __m512 s = _mm512_fmadd_ps(vk, delta[b], _mm512_mul_ps(_mm512_loadu_ps(row + 16 * b), vdecay));
      _mm512_storeu_ps(row + 16 * b, s);
      acc[b] = _mm512_fmadd_ps(s, vq, acc[b]);
    }
  }
  for (int b = 0; b < V; ++b) _mm512_storeu_ps(o + 16 * b, acc[b]);
}

}  // namespace

void kda_head_step(float* S, const float* q, const float* k, const float* v, const float* g, float beta, int D,
                   float* o) {
  switch (D) {
    case 64: return head_step<4>(S, q, k, v, g, beta, o);
    case 128: return head_step<8>(S, q, k, v, g, beta, o);
    case 256: return head_step<16>(S, q, k, v, g, beta, o);
    default: return avx2_impl::kda_head_step(S, q, k, v, g, beta, D, o);
  }
}

}  // namespace waste::kernels::detail::avx512_impl

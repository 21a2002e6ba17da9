#include "compute/convert/rvq.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "shared/fp16.hpp"

namespace waste::convert {

std::uint64_t Rng::next() noexcept {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void Rng::permutation(std::uint32_t n, std::vector<std::uint32_t>& out) {
  out.resize(n);
  for (std::uint32_t i = 0; i < n; ++i) out[i] = i;
  for (std::uint32_t i = n; i > 1; --i) std::swap(out[i - 1], out[below(i)]);
}

int nearest_scalar(const float* x, const float* book, const float* norms, int entries) noexcept {
  int best = 0;
  float best_d = std::numeric_limits<float>::infinity();
  for (int e = 0; e < entries; ++e) {
    const float* c = book + std::size_t(e) * kVecDim;
    float dot = x[0] * c[0];
    for (int d = 1; d < kVecDim; ++d) dot = std::fma(x[d], c[d], dot);
    const float dist = std::fma(-2.0f, dot, norms[e]);
    if (dist < best_d) {
      best_d = dist;
      best = e;
    }
  }
  return best;
}

void centroid_norms(const float* book, int entries, float* norms) noexcept {
  for (int e = 0; e < entries; ++e) {
    const float* c = book + std::size_t(e) * kVecDim;
    float n = c[0] * c[0];
    for (int d = 1; d < kVecDim; ++d) n = std::fma(c[d], c[d], n);
    norms[e] = n;
  }
}

#if defined(__x86_64__)
// Eight points per register (lane p = point p), one centroid broadcast at a time: each lane
// computes exactly nearest_scalar's operations for its point, and a strict compare keeps the
// first minimum. At 9 FMA lanes per point and centroid this runs at the FMA peak (measured:
// 237 ns/point for 256 entries at 9.7 G FMA lanes/s); a 4-centroid unroll did not help.
__attribute__((target("avx2,fma"))) static void nearest8_avx2(const float* xs, const float* book, const float* norms,
                                                              int entries, std::int32_t* out) noexcept {
  __m256 x[kVecDim];
  for (int d = 0; d < kVecDim; ++d) {
    x[d] = _mm256_setr_ps(xs[0 * 8 + d], xs[1 * 8 + d], xs[2 * 8 + d], xs[3 * 8 + d], xs[4 * 8 + d], xs[5 * 8 + d],
                          xs[6 * 8 + d], xs[7 * 8 + d]);
  }
  const __m256 m2 = _mm256_set1_ps(-2.0f);
  __m256 best_d = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256 best_i = _mm256_setzero_ps();  // indices kept as exact floats (< 2^24)
  for (int e = 0; e < entries; ++e) {
    const float* c = book + std::size_t(e) * kVecDim;
    __m256 dot = _mm256_mul_ps(x[0], _mm256_broadcast_ss(c));
    for (int d = 1; d < kVecDim; ++d) dot = _mm256_fmadd_ps(x[d], _mm256_broadcast_ss(c + d), dot);
    const __m256 dist = _mm256_fmadd_ps(m2, dot, _mm256_broadcast_ss(norms + e));
    const __m256 lt = _mm256_cmp_ps(dist, best_d, _CMP_LT_OQ);
    best_d = _mm256_blendv_ps(best_d, dist, lt);
    best_i = _mm256_blendv_ps(best_i, _mm256_set1_ps(float(e)), lt);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_cvttps_epi32(best_i));
}
#endif

bool simd_available() noexcept {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

void nearest_many(const float* xs, std::int64_t n, const float* book, const float* norms, int entries,
                  std::int32_t* out, bool simd) noexcept {
  std::int64_t i = 0;
#if defined(__x86_64__)
  if (simd && simd_available()) {
    for (; i + 8 <= n; i += 8) nearest8_avx2(xs + i * kVecDim, book, norms, entries, out + i);
  }
#endif
  for (; i < n; ++i) out[i] = nearest_scalar(xs + i * kVecDim, book, norms, entries);
}

void RvqBooks::set_stage(int stage, std::span<const float> centroids) {
  const std::size_t per = std::size_t(entries) * kVecDim;
  fp16.resize(std::size_t(stages) * per);
  value.resize(fp16.size());
  norms.resize(std::size_t(stages) * entries);
  for (std::size_t i = 0; i < per; ++i) {
    const std::uint16_t h = f32_to_fp16(centroids[i]);
    fp16[stage * per + i] = h;
    value[stage * per + i] = fp16_to_f32_flush(h);
  }
  centroid_norms(&value[stage * per], entries, &norms[std::size_t(stage) * entries]);
}

namespace {

constexpr std::int64_t kChunk = 4096;  // fixed work unit: partial sums never depend on the thread count

void assign_all(const std::vector<float>& v, std::int64_t n, const float* book, const float* norms, int entries,
                std::vector<std::int32_t>& a, ThreadPool& pool, bool simd) {
  pool.parallel_for(n, kChunk, [&](std::int64_t b, std::int64_t e) {
    nearest_many(&v[std::size_t(b) * kVecDim], e - b, book, norms, entries, &a[std::size_t(b)], simd);
  });
}

}  // namespace

RvqBooks train_rvq(std::vector<float>& v, const RvqParams& p, ThreadPool& pool) {
  RvqBooks books;
  books.stages = p.stages;
  books.entries = p.entries;
  const std::int64_t n = std::int64_t(v.size() / kVecDim);
  Rng rng(0);
  std::vector<std::uint32_t> perm;
  std::vector<std::int32_t> assign(std::size_t(n), 0);
  const std::int64_t n_chunks = (n + kChunk - 1) / kChunk;
  const std::size_t per = std::size_t(p.entries) * kVecDim;
  std::vector<double> partial(std::size_t(n_chunks) * p.entries * (kVecDim + 1));
  std::vector<float> cent(per), cent_norms(std::size_t(p.entries));
  for (int s = 0; s < p.stages; ++s) {
    rng.permutation(std::uint32_t(n), perm);
    for (int e = 0; e < p.entries; ++e) {
      const std::size_t src = n ? std::size_t(perm[std::size_t(e % n)]) : 0;
      for (int d = 0; d < kVecDim; ++d) cent[std::size_t(e) * kVecDim + d] = n ? v[src * kVecDim + d] : 0.0f;
    }
    for (int it = 0; it < p.iterations; ++it) {
      centroid_norms(cent.data(), p.entries, cent_norms.data());
      assign_all(v, n, cent.data(), cent_norms.data(), p.entries, assign, pool, p.simd);
      std::fill(partial.begin(), partial.end(), 0.0);
      pool.parallel_for(n_chunks, 1, [&](std::int64_t cb, std::int64_t ce) {
        for (std::int64_t c = cb; c < ce; ++c) {
          double* acc = &partial[std::size_t(c) * p.entries * (kVecDim + 1)];
          for (std::int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
            double* a = acc + std::size_t(assign[std::size_t(i)]) * (kVecDim + 1);
            for (int d = 0; d < kVecDim; ++d) a[d] += v[std::size_t(i) * kVecDim + d];
            a[kVecDim] += 1.0;
          }
        }
      });
      for (int e = 0; e < p.entries; ++e) {
        double sum[kVecDim + 1] = {};
        for (std::int64_t c = 0; c < n_chunks; ++c) {  // chunk order: deterministic
          const double* a = &partial[(std::size_t(c) * p.entries + e) * (kVecDim + 1)];
          for (int d = 0; d <= kVecDim; ++d) sum[d] += a[d];
        }
        if (sum[kVecDim] > 0) {  // an empty cluster keeps its centroid
          for (int d = 0; d < kVecDim; ++d) cent[std::size_t(e) * kVecDim + d] = float(sum[d] / sum[kVecDim]);
        }
      }
    }
    books.set_stage(s, cent);
    // Residual against the stored (fp16) centroid re-assigned after the last update: what the
    // encoder and the engine will see.
    const float* bv = &books.value[std::size_t(s) * per];
    const float* bn = &books.norms[std::size_t(s) * p.entries];
    assign_all(v, n, bv, bn, p.entries, assign, pool, p.simd);
    pool.parallel_for(n, kChunk, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        float* x = &v[std::size_t(i) * kVecDim];
        const int k = assign[std::size_t(i)];
        for (int d = 0; d < kVecDim; ++d) x[d] -= bv[std::size_t(k) * kVecDim + d];
      }
    });
  }
  return books;
}

void encode_vectors(const RvqBooks& books, const float* xs, std::int64_t n, std::uint8_t* out, bool simd,
                    std::vector<float>& scratch) {
  const std::size_t per = std::size_t(books.entries) * kVecDim;
  scratch.resize(std::size_t(n) * kVecDim + std::size_t(n));  // residuals, then int32 indices
  float* r = scratch.data();
  auto* ids = reinterpret_cast<std::int32_t*>(scratch.data() + std::size_t(n) * kVecDim);
  static_assert(sizeof(float) == sizeof(std::int32_t));
  std::memcpy(r, xs, std::size_t(n) * kVecDim * sizeof(float));
  for (int s = 0; s < books.stages; ++s) {
    const float* bv = &books.value[s * per];
    nearest_many(r, n, bv, &books.norms[std::size_t(s) * books.entries], books.entries, ids, simd);
    for (std::int64_t i = 0; i < n; ++i) {
      out[i * books.stages + s] = std::uint8_t(ids[i]);
      const float* c = bv + std::size_t(ids[i]) * kVecDim;
      for (int d = 0; d < kVecDim; ++d) r[i * kVecDim + d] -= c[d];
    }
  }
}

}  // namespace waste::convert

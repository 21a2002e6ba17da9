#include "compute/convert/rvq.hpp"

#include <algorithm>
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

int nearest_scalar(const float* x, const float* book_t, int entries) noexcept {
  int best = 0;
  float best_d = std::numeric_limits<float>::infinity();
  for (int e = 0; e < entries; ++e) {
    float acc = 0.0f;
    for (int d = 0; d < kVecDim; ++d) {
      const float t = x[d] - book_t[d * entries + e];
      const float sq = t * t;  // two statements: never contracted into an FMA
      acc = acc + sq;
    }
    if (acc < best_d) {
      best_d = acc;
      best = e;
    }
  }
  return best;
}

#if defined(__x86_64__)
// AVX2 only (no FMA in the target): mul and add stay separate, as in the scalar loop.
__attribute__((target("avx2"))) static int nearest_avx2(const float* x, const float* book_t, int entries) noexcept {
  __m256 xb[kVecDim];
  for (int d = 0; d < kVecDim; ++d) xb[d] = _mm256_set1_ps(x[d]);
  __m256 best_d = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256i best_i = _mm256_setzero_si256();
  __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i step = _mm256_set1_epi32(8);
  for (int e = 0; e < entries; e += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int d = 0; d < kVecDim; ++d) {
      const __m256 t = _mm256_sub_ps(xb[d], _mm256_loadu_ps(book_t + d * entries + e));
      acc = _mm256_add_ps(acc, _mm256_mul_ps(t, t));
    }
    const __m256 lt = _mm256_cmp_ps(acc, best_d, _CMP_LT_OQ);  // strict: a lane keeps its first minimum
    best_d = _mm256_blendv_ps(best_d, acc, lt);
    best_i = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(best_i), _mm256_castsi256_ps(idx), lt));
    idx = _mm256_add_epi32(idx, step);
  }
  alignas(32) float dv[8];
  alignas(32) int iv[8];
  _mm256_store_ps(dv, best_d);
  _mm256_store_si256(reinterpret_cast<__m256i*>(iv), best_i);
  int best = iv[0];
  float bd = dv[0];
  for (int l = 1; l < 8; ++l) {  // equal minima: the lowest index, as the scalar scan
    if (dv[l] < bd || (dv[l] == bd && iv[l] < best)) {
      bd = dv[l];
      best = iv[l];
    }
  }
  return best;
}
#endif

bool simd_available() noexcept {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

int nearest_simd(const float* x, const float* book_t, int entries) noexcept {
#if defined(__x86_64__)
  if (entries % 8 == 0 && simd_available()) return nearest_avx2(x, book_t, entries);
#endif
  return nearest_scalar(x, book_t, entries);
}

void RvqBooks::set_stage(int stage, std::span<const float> centroids) {
  const std::size_t per = std::size_t(entries) * kVecDim;
  fp16.resize(std::size_t(stages) * per);
  value.resize(fp16.size());
  transposed.resize(fp16.size());
  for (std::size_t i = 0; i < per; ++i) {
    const std::uint16_t h = f32_to_fp16(centroids[i]);
    fp16[stage * per + i] = h;
    value[stage * per + i] = fp16_to_f32_flush(h);
  }
  for (int e = 0; e < entries; ++e) {
    for (int d = 0; d < kVecDim; ++d) transposed[stage * per + std::size_t(d) * entries + e] = value[stage * per + std::size_t(e) * kVecDim + d];
  }
}

namespace {

using NearestFn = int (*)(const float*, const float*, int) noexcept;

constexpr std::int64_t kChunk = 4096;  // fixed work unit: partial sums never depend on the thread count

void assign_all(const std::vector<float>& v, std::int64_t n, const float* book_t, int entries, std::vector<std::int32_t>& a,
                ThreadPool& pool, NearestFn nearest) {
  pool.parallel_for(n, kChunk, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) a[std::size_t(i)] = nearest(&v[std::size_t(i) * kVecDim], book_t, entries);
  });
}

}  // namespace

RvqBooks train_rvq(std::vector<float>& v, const RvqParams& p, ThreadPool& pool) {
  RvqBooks books;
  books.stages = p.stages;
  books.entries = p.entries;
  const std::int64_t n = std::int64_t(v.size() / kVecDim);
  const NearestFn nearest = simd_available() ? nearest_simd : nearest_scalar;
  Rng rng(0);
  std::vector<std::uint32_t> perm;
  std::vector<std::int32_t> assign(std::size_t(n), 0);
  const std::int64_t n_chunks = (n + kChunk - 1) / kChunk;
  const std::size_t per = std::size_t(p.entries) * kVecDim;
  std::vector<double> partial(std::size_t(n_chunks) * p.entries * (kVecDim + 1));
  std::vector<float> cent(per), cent_t(per);
  auto transpose = [&] {
    for (int e = 0; e < p.entries; ++e)
      for (int d = 0; d < kVecDim; ++d) cent_t[std::size_t(d) * p.entries + e] = cent[std::size_t(e) * kVecDim + d];
  };
  for (int s = 0; s < p.stages; ++s) {
    rng.permutation(std::uint32_t(n), perm);
    for (int e = 0; e < p.entries; ++e) {
      const std::size_t src = n ? std::size_t(perm[std::size_t(e % n)]) : 0;
      for (int d = 0; d < kVecDim; ++d) cent[std::size_t(e) * kVecDim + d] = n ? v[src * kVecDim + d] : 0.0f;
    }
    for (int it = 0; it < p.iterations; ++it) {
      transpose();
      assign_all(v, n, cent_t.data(), p.entries, assign, pool, nearest);
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
    const float* bt = &books.transposed[std::size_t(s) * per];
    const float* bv = &books.value[std::size_t(s) * per];
    pool.parallel_for(n, kChunk, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        float* x = &v[std::size_t(i) * kVecDim];
        const int k = nearest(x, bt, p.entries);
        for (int d = 0; d < kVecDim; ++d) x[d] -= bv[std::size_t(k) * kVecDim + d];
      }
    });
  }
  return books;
}

void encode_vector(const RvqBooks& books, const float* x, std::uint8_t* out, bool simd) noexcept {
  float r[kVecDim];
  std::memcpy(r, x, sizeof r);
  const std::size_t per = std::size_t(books.entries) * kVecDim;
  for (int s = 0; s < books.stages; ++s) {
    const float* bt = &books.transposed[s * per];
    const int k = simd ? nearest_simd(r, bt, books.entries) : nearest_scalar(r, bt, books.entries);
    out[s] = std::uint8_t(k);
    const float* c = &books.value[s * per + std::size_t(k) * kVecDim];
    for (int d = 0; d < kVecDim; ++d) r[d] -= c[d];
  }
}

}  // namespace waste::convert

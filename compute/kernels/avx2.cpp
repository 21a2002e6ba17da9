// AVX2 + FMA kernels. Contract with generic.cpp (docs/design/dispatch.md):
//   RVQ LUT build, LUT quantise, RVQ apply, VQ4P apply: bit-identical (vectorised across entries
//     or rows, each lane doing generic's operations in generic's order, no FMA).
//   kda_head_step: vectorised across columns with FMA, so the summation order differs; it agrees
//     with generic to ~1e-6 relative. matvec / matmul live in avx2_matvec.cpp.
#include "compute/kernels/avx2.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "compute/kernels/avx2_common.hpp"
#include "compute/kernels/kernel_impl.hpp"
#include "shared/fp16.hpp"

namespace waste::kernels::detail::avx2_impl {
using avx2_common::load_runs;
using avx2_common::transpose8;

void rvq_lut_build(const float* x, const float* const* books, int stages, int entries, int vec_dim,
                   int v_begin, int v_end, float* lut) {
  if (vec_dim != 8 || entries % 8 != 0) {
    generic_impl::rvq_lut_build(x, books, stages, entries, vec_dim, v_begin, v_end, lut);
    return;
  }
  const std::int64_t per_vector = static_cast<std::int64_t>(stages) * entries;
  for (int s = 0; s < stages; ++s) {
    for (int e0 = 0; e0 < entries; e0 += 8) {
      // Columns of 8 centroids: column d holds component d of entries e0..e0+7.
      __m256 column[8];
      for (int i = 0; i < 8; ++i) column[i] = _mm256_loadu_ps(books[s] + (e0 + i) * 8);
      transpose8(column);
      for (int v = v_begin; v < v_end; ++v) {
        const float* xv = x + static_cast<std::int64_t>(v) * 8;
        __m256 acc = _mm256_setzero_ps();
        for (int d = 0; d < 8; ++d) {  // generic's order: acc += x[d] * c[d], d ascending
          acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_broadcast_ss(xv + d), column[d]));
        }
        _mm256_storeu_ps(lut + v * per_vector + s * entries + e0, acc);
      }
    }
  }
}

void rvq_lut_quantize(const float* lut, int n_vectors, int stages, int entries, std::int8_t* lut_q,
                      float* block_scales) {
  const std::int64_t per_vector = static_cast<std::int64_t>(stages) * entries;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int b = 0; b * kLutQuantBlock < n_vectors; ++b) {
    const int v_end = std::min(n_vectors, (b + 1) * kLutQuantBlock);
    const std::int64_t begin = static_cast<std::int64_t>(b) * kLutQuantBlock * per_vector;
    const std::int64_t end = static_cast<std::int64_t>(v_end) * per_vector;
    __m256 vmax = _mm256_setzero_ps();
    std::int64_t i = begin;
    for (; i + 8 <= end; i += 8) vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(lut + i), abs_mask));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float mx = 0.0f;
    for (float lane : lanes) mx = std::max(mx, lane);
    for (; i < end; ++i) mx = std::max(mx, std::fabs(lut[i]));
    const float inverse = mx > 0.0f ? 127.0f / mx : 0.0f;
    block_scales[b] = mx / 127.0f;
    const __m256 vinv = _mm256_set1_ps(inverse);
    const auto quantize8 = [&](std::int64_t at) {
      const __m256 q = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(lut + at), vinv),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(q, lo), hi));
    };
    i = begin;
    for (; i + 32 <= end; i += 32) {
      const __m256i ab = _mm256_packs_epi32(quantize8(i), quantize8(i + 8));
      const __m256i cd = _mm256_packs_epi32(quantize8(i + 16), quantize8(i + 24));
      const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lut_q + i), bytes);
    }
    for (; i < end; ++i) {
      const float q = std::nearbyint(lut[i] * inverse);
      lut_q[i] = static_cast<std::int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
}

namespace {

// Row scales of 8 rows starting at r (the scalar decode: exponent 31 is not inf here).
inline __m256 row_scales8(const std::uint16_t* scales, int r, int valid) {
  alignas(32) float s[8] = {};
  for (int k = 0; k < valid; ++k) s[k] = fp16_to_f32(load_u16(scales, r + k));
  return _mm256_load_ps(s);
}

inline void store_rows(float* y, int r, int valid, __m256 v) {
  if (valid == 8) {
    _mm256_storeu_ps(y + r, v);
    return;
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  for (int k = 0; k < valid; ++k) y[r + k] = lanes[k];
}

// One lane per row, 8 rows per gather, summed exactly like generic. Loop order: for each vector
// position, every 8-row group of the tile (kernel_impl.hpp: rvq_tile_rows), accumulators in an L1
// array, so the position's LUT slice is fetched once per tile.
template <int S>
void apply_stages(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin,
                  int row_end) {
  const std::int64_t per_vector = static_cast<std::int64_t>(S) * entries;
  const std::int64_t block_bytes = static_cast<std::int64_t>(m.n_vectors) * kRowBlock * S;
  alignas(32) float acc[kRvqTileBlocks * kRowBlock];
  const int tile = rvq_tile_rows(row_begin, row_end);
  for (int t0 = row_begin; t0 < row_end; t0 += tile) {
    const int t1 = std::min(row_end, t0 + tile);
    // A last partial group reads the block's padding rows (always present); those lanes are
    // never stored.
    const int n_groups = (t1 - t0 + 7) / 8;
    const std::uint8_t* tile_index = m.index + static_cast<std::int64_t>(t0 / kRowBlock) * block_bytes;
    for (int g = 0; g < n_groups; ++g) _mm256_store_ps(acc + 8 * g, _mm256_setzero_ps());
    const int tile_blocks = (t1 - t0 + kRowBlock - 1) / kRowBlock;
    for (int v = 0; v < std::min(kRvqPrefetchAhead, m.n_vectors); ++v) {
      rvq_prefetch_runs<S>(tile_index + static_cast<std::int64_t>(v) * kRowBlock * S, block_bytes, tile_blocks);
    }
    for (int v = 0; v < m.n_vectors; ++v) {
      const float* lut_v = lut + v * per_vector;
      const std::uint8_t* runs_v = tile_index + static_cast<std::int64_t>(v) * kRowBlock * S;
      if (v + kRvqPrefetchAhead < m.n_vectors) {
        rvq_prefetch_runs<S>(runs_v + kRvqPrefetchAhead * kRowBlock * S, block_bytes, tile_blocks);
      }
      for (int g = 0; g < n_groups; ++g) {
        __m256i idx[S];
        load_runs<S>(runs_v + (g >> 3) * block_bytes + (g & 7) * 8 * S, idx);
        __m256 term = _mm256_i32gather_ps(lut_v, idx[0], 4);
        for (int s = 1; s < S; ++s) {
          term = _mm256_add_ps(term, _mm256_i32gather_ps(lut_v + s * entries, idx[s], 4));
        }
        _mm256_store_ps(acc + 8 * g, _mm256_add_ps(_mm256_load_ps(acc + 8 * g), term));
      }
    }
    for (int g = 0; g < n_groups; ++g) {
      const int r = t0 + 8 * g;
      const int valid = std::min(8, t1 - r);
      store_rows(y, r, valid, _mm256_mul_ps(_mm256_load_ps(acc + 8 * g), row_scales8(m.scales, r, valid)));
    }
  }
}

// The same sums with scalar table loads instead of gathers. On Zen 1 and Zen 2 a ymm gather is
// microcoded (~8 cycles of throughput for 8 lookups); two scalar loads a cycle do the 8 lookups
// in ~4, so there this is the faster apply. Same tiles, same order per row (stage terms left to
// right into a temp, then into acc, vector by vector): the bits of generic and of the gathers.
template <int S>
void apply_stages_loads(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin,
                        int row_end) {
  const std::int64_t per_vector = static_cast<std::int64_t>(S) * entries;
  const std::int64_t block_bytes = static_cast<std::int64_t>(m.n_vectors) * kRowBlock * S;
  alignas(32) float acc[kRvqTileBlocks * kRowBlock];
  const int tile = rvq_tile_rows(row_begin, row_end);
  for (int t0 = row_begin; t0 < row_end; t0 += tile) {
    const int t1 = std::min(row_end, t0 + tile);
    const int n_groups = (t1 - t0 + 7) / 8;  // a last partial group reads the block's padding rows
    const std::uint8_t* tile_index = m.index + static_cast<std::int64_t>(t0 / kRowBlock) * block_bytes;
    std::fill(acc, acc + 8 * n_groups, 0.0f);
    const int tile_blocks = (t1 - t0 + kRowBlock - 1) / kRowBlock;
    for (int v = 0; v < std::min(kRvqPrefetchAhead, m.n_vectors); ++v) {
      rvq_prefetch_runs<S>(tile_index + static_cast<std::int64_t>(v) * kRowBlock * S, block_bytes, tile_blocks);
    }
    // Vector positions two at a time for S == 3: a row's acc takes both positions' terms (in
    // order) while it is in a register, halving the accumulator traffic.
    const int pair_end = S == 3 ? m.n_vectors & ~1 : 0;
    for (int v = 0; v < pair_end; v += 2) {
      const float* t_0 = lut + v * per_vector;
      const float* u_0 = t_0 + per_vector;
      const std::uint8_t* runs_v = tile_index + static_cast<std::int64_t>(v) * kRowBlock * S;
      for (int pf = 0; pf < 2; ++pf) {
        if (v + pf + kRvqPrefetchAhead < m.n_vectors) {
          rvq_prefetch_runs<S>(runs_v + (pf + kRvqPrefetchAhead) * kRowBlock * S, block_bytes, tile_blocks);
        }
      }
      for (int g = 0; g < n_groups; ++g) {
        const std::uint8_t* run = runs_v + (g >> 3) * block_bytes + (g & 7) * 8 * S;  // 8 rows x 3 bytes
        std::uint64_t w[3], x[3];  // 8 rows' 24 index bytes in three word loads, per position
        std::memcpy(w, run, sizeof w);
        std::memcpy(x, run + kRowBlock * S, sizeof x);
        const auto at = [](const std::uint64_t* words, int i) {
          return unsigned(words[i >> 3] >> ((i & 7) * 8)) & 0xffu;
        };
        float* a = acc + 8 * g;
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          float term = t_0[at(w, 3 * k)];
          term += t_0[entries + at(w, 3 * k + 1)];
          term += t_0[2 * entries + at(w, 3 * k + 2)];
          float next = u_0[at(x, 3 * k)];
          next += u_0[entries + at(x, 3 * k + 1)];
          next += u_0[2 * entries + at(x, 3 * k + 2)];
          float sum = a[k] + term;
          a[k] = sum + next;
        }
      }
    }
    for (int v = pair_end; v < m.n_vectors; ++v) {
      const float* t_0 = lut + v * per_vector;
      const std::uint8_t* runs_v = tile_index + static_cast<std::int64_t>(v) * kRowBlock * S;
      if (v + kRvqPrefetchAhead < m.n_vectors) {
        rvq_prefetch_runs<S>(runs_v + kRvqPrefetchAhead * kRowBlock * S, block_bytes, tile_blocks);
      }
      for (int g = 0; g < n_groups; ++g) {
        const std::uint8_t* run = runs_v + (g >> 3) * block_bytes + (g & 7) * 8 * S;  // 8 rows x S bytes
        float* a = acc + 8 * g;
        for (int k = 0; k < 8; ++k) {
          const std::uint8_t* ix = run + k * S;
          float term = t_0[ix[0]];
          if constexpr (S > 1) term += t_0[entries + ix[1]];
          if constexpr (S > 2) term += t_0[2 * entries + ix[2]];
          a[k] += term;
        }
      }
    }
    for (int g = 0; g < n_groups; ++g) {
      const int r = t0 + 8 * g;
      const int valid = std::min(8, t1 - r);
      store_rows(y, r, valid, _mm256_mul_ps(_mm256_load_ps(acc + 8 * g), row_scales8(m.scales, r, valid)));
    }
  }
}

// Gathers or scalar loads, decided once: WASTE_RVQ_LOOKUPS=gather|loads, else loads on the AMD
// cores whose gathers are microcoded (Zen 1, Zen 2), gathers everywhere else.
bool rvq_scalar_loads() {
  static const bool loads = [] {
    if (const char* forced = std::getenv("WASTE_RVQ_LOOKUPS"); forced != nullptr && *forced != '\0') {
      return std::string_view(forced) == "loads";
    }
    __builtin_cpu_init();
    return __builtin_cpu_is("znver1") || __builtin_cpu_is("znver2");
  }();
  return loads;
}

}  // namespace

void rvq_apply_lookups(RvqLookups how, const RvqMatrix& m, const float* lut, int entries, float* y,
                       int row_begin, int row_end) {
  assert(row_begin % kRowBlock == 0);
  const bool loads = how == RvqLookups::loads;
  switch (m.stages) {
    case 1: (loads ? apply_stages_loads<1> : apply_stages<1>)(m, lut, entries, y, row_begin, row_end); return;
    case 2: (loads ? apply_stages_loads<2> : apply_stages<2>)(m, lut, entries, y, row_begin, row_end); return;
    case 3: (loads ? apply_stages_loads<3> : apply_stages<3>)(m, lut, entries, y, row_begin, row_end); return;
    default: generic_impl::rvq_apply(m, lut, entries, y, row_begin, row_end); return;
  }
}

void rvq_apply(const RvqMatrix& m, const float* lut, int entries, float* y, int row_begin,
               int row_end) {
  rvq_apply_lookups(rvq_scalar_loads() ? RvqLookups::loads : RvqLookups::gather, m, lut, entries, y, row_begin,
                    row_end);
}

void rvq_apply_vq4p_gather(const RvqMatrix& m, const std::int8_t* lut_q, const float* block_scales,
                           float* y, int row_begin, int row_end) {
  assert(row_begin % kRowBlock == 0);
  constexpr int kPerVector = 4 * 64;
  const std::int64_t block_bytes = static_cast<std::int64_t>(m.n_vectors) * kRowBlock * 3;
  // y holds each row's running acc; the int8 LUT of one 32-position block is widened to int32 once
  // per call so the lookups can be gathers.
  alignas(32) std::int32_t wide[kLutQuantBlock * kPerVector];
  std::fill(y + row_begin, y + row_end, 0.0f);
  const __m256i six = _mm256_set1_epi32(63);
  for (int b = 0; b * kLutQuantBlock < m.n_vectors; ++b) {
    const int v_begin = b * kLutQuantBlock;
    const int v_end = std::min(m.n_vectors, v_begin + kLutQuantBlock);
    const std::int8_t* src = lut_q + static_cast<std::int64_t>(v_begin) * kPerVector;
    for (int i = 0; i < (v_end - v_begin) * kPerVector; i += 16) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      _mm256_store_si256(reinterpret_cast<__m256i*>(wide + i), _mm256_cvtepi8_epi32(bytes));
      _mm256_store_si256(reinterpret_cast<__m256i*>(wide + i + 8),
                         _mm256_cvtepi8_epi32(_mm_srli_si128(bytes, 8)));
    }
    const __m256 scale = _mm256_set1_ps(block_scales[b]);
    for (int r0 = row_begin; r0 < row_end; r0 += kRowBlock) {
      const std::uint8_t* block = m.index + static_cast<std::int64_t>(r0 / kRowBlock) * block_bytes;
      for (int g = 0; g < 8; ++g) {
        const int r = r0 + 8 * g;
        const int valid = std::clamp(row_end - r, 0, 8);
        if (valid == 0) break;
        __m256i sum = _mm256_setzero_si256();  // exact integers: any order gives generic's sum
        for (int v = v_begin; v < v_end; ++v) {
          __m256i run[3];
          load_runs<3>(block + static_cast<std::int64_t>(v) * kRowBlock * 3 + g * 24, run);
          const __m256i i0 = _mm256_and_si256(run[0], six);
          const __m256i i1 = _mm256_and_si256(
              _mm256_or_si256(_mm256_srli_epi32(run[0], 6), _mm256_slli_epi32(run[1], 2)), six);
          const __m256i i2 = _mm256_and_si256(
              _mm256_or_si256(_mm256_srli_epi32(run[1], 4), _mm256_slli_epi32(run[2], 4)), six);
          const __m256i i3 = _mm256_srli_epi32(run[2], 2);
          const int* t = wide + (v - v_begin) * kPerVector;
          sum = _mm256_add_epi32(sum, _mm256_i32gather_epi32(t, i0, 4));
          sum = _mm256_add_epi32(sum, _mm256_i32gather_epi32(t + 64, i1, 4));
          sum = _mm256_add_epi32(sum, _mm256_i32gather_epi32(t + 128, i2, 4));
          sum = _mm256_add_epi32(sum, _mm256_i32gather_epi32(t + 192, i3, 4));
        }
        const __m256 term = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(sum));
        if (valid == 8) {
          _mm256_storeu_ps(y + r, _mm256_add_ps(_mm256_loadu_ps(y + r), term));
        } else {
          alignas(32) float lanes[8];
          _mm256_store_ps(lanes, term);
          for (int k = 0; k < valid; ++k) y[r + k] += lanes[k];
        }
      }
    }
  }
  for (int r = row_begin; r < row_end; ++r) y[r] *= fp16_to_f32(load_u16(m.scales, r));
}

void kda_head_step(float* S, const float* q, const float* k, const float* v, const float* g,
                   float beta, int D, float* o) {
  assert(D <= kKdaMaxDim);
  alignas(32) float delta[kKdaMaxDim];
  const int vec_end = D / 8 * 8;
  std::fill(o, o + D, 0.0f);
  for (int i = 0; i < D; ++i) {
    float* row = S + static_cast<std::int64_t>(i) * D;
    const float decay = std::exp(g[i]);
    const __m256 vdecay = _mm256_set1_ps(decay), vk = _mm256_set1_ps(k[i]);
    int j = 0;
    for (; j < vec_end; j += 8) {
      const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(row + j), vdecay);
      _mm256_storeu_ps(row + j, s);
      _mm256_storeu_ps(o + j, _mm256_fmadd_ps(s, vk, _mm256_loadu_ps(o + j)));
    }
    for (; j < D; ++j) {
      row[j] *= decay;
      o[j] += row[j] * k[i];
    }
  }
  for (int j = 0; j < D; ++j) delta[j] = beta * (v[j] - o[j]);
  std::fill(o, o + D, 0.0f);
  for (int i = 0; i < D; ++i) {
    float* row = S + static_cast<std::int64_t>(i) * D;
    const __m256 vk = _mm256_set1_ps(k[i]), vq = _mm256_set1_ps(q[i]);
    int j = 0;
    for (; j < vec_end; j += 8) {
      const __m256 s = _mm256_fmadd_ps(vk, _mm256_load_ps(delta + j), _mm256_loadu_ps(row + j));
      _mm256_storeu_ps(row + j, s);
      _mm256_storeu_ps(o + j, _mm256_fmadd_ps(s, vq, _mm256_loadu_ps(o + j)));
    }
    for (; j < D; ++j) {
      row[j] += k[i] * delta[j];
      o[j] += row[j] * q[i];
    }
  }
}

}  // namespace waste::kernels::detail::avx2_impl

namespace waste::kernels::detail {

const KernelTable& avx2_table() {
  namespace impl = avx2_impl;
  static const KernelTable table{
      .isa = "avx2",
      .matvec = impl::matvec,
      .matmul = impl::matmul,
      .rvq_lut_build = impl::rvq_lut_build,
      .rvq_lut_quantize = impl::rvq_lut_quantize,
      .rvq_apply = impl::rvq_apply,
      .rvq_apply_vq4p = impl::rvq_apply_vq4p_shuffle,
      .rvq_lut_to_q16 = generic_impl::rvq_lut_to_q16,
      .rvq_apply_q16 = generic_impl::rvq_apply_q16,
      .rvq_matmul = impl::rvq_matmul,
      .kda_head_step = impl::kda_head_step,
      .vq4p_from_registers = true,
      .exp_weights = impl::exp_matches_libm() ? impl::exp_weights : nullptr,
      .sum_exp = impl::sum_exp,
  };
  return table;
}

}  // namespace waste::kernels::detail

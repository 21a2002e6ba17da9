// The ISA-independent driver of the trunk matvec / matmul: x preparation, row and token tiling
// and the per-(row, token) summation order. avx2_matvec.cpp and avx512_matvec.cpp instantiate it
// with their own Isa traits (defined in an anonymous namespace there, so every instantiation is
// private to its file and compiled with that file's flags). Include only from those files.
//
// Isa provides: V (a float vector of kLanes lanes), zero/load/set1/fma/hsum, decode_scales
// (fp16 -> f32, the subnormal-keeping v0 decode, up to 16 at a time), prefetch, the tile sizes
// kMatvecRows / kTileRows / kTileTokens / kBlockRows, and one decoder per format (F32, Q8, Q4, Q3)
// whose decode(row, s, w) writes the weights of step s (kVecs * kLanes columns, kStepBytes
// bytes) as kVecs vectors. Optional decoder members (defaults in brackets): kVecs [2];
// kScaleMul [1], a power of two the decoded group scales are multiplied by (a decoder that leaves
// its codes shifted up by 2^k sets 2^-k: both products are exact, so nothing rounds differently);
// column(i) [i], the column inside a step that vector i / kLanes, lane i % kLanes holds (x is
// stored in that order once per call, so the decoder needs no shuffle).
// Optional Isa members for the one-token (matvec) tile of a grouped format: kMatvecGroups [1],
// groups of each row in flight at once (independent partial-sum chains, so fewer rows need be in
// flight and each row tile streams fewer, longer runs of memory); kMatvecPrefetchTiles [1], how
// many row tiles ahead the software prefetch reads; prefetch_matvec(a) [prefetch(a)], the
// prefetch instruction it uses. None of them changes the summation order below.
//
// Summation order, the same for every tile shape (which is why matmul gives each token the bits
// matvec gives it): per group, part = init (0, or -kOffset * per-lane x sums), then for each step
// s ascending and each vector v ascending part = fma(w_v, x_v, part); then acc = fma(scale,
// part, acc); y = hsum(acc). F32 has one chain over all steps and no scale.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "compute/kernels/kernel_impl.hpp"

namespace waste::kernels::detail::matmul_tiles {

// What a tile needs to know about the matrix, derived once per call.
struct Shape {
  const std::uint8_t* payload;
  const std::uint16_t* scales;
  std::int64_t row_stride;
  std::int64_t cols;
  std::int64_t n_groups;         // 1 for F32
  std::int64_t steps;            // ceil(cols / step)
  std::int64_t steps_per_group;  // steps for F32
  int tail;                      // valid columns of the last step, 0 when it is full
};

template <class Fmt>
constexpr int vecs() {
  if constexpr (requires { Fmt::kVecs; }) return Fmt::kVecs;
  return 2;
}
template <class Fmt>
constexpr float scale_mul() {
  if constexpr (requires { Fmt::kScaleMul; }) return Fmt::kScaleMul;
  return 1.0f;
}
template <class Fmt>
constexpr bool permuted() {
  return requires { Fmt::column(0); };
}
template <class Isa>
constexpr int matvec_groups() {
  if constexpr (requires { Isa::kMatvecGroups; }) return Isa::kMatvecGroups;
  return 1;
}
template <class Isa>
constexpr int matvec_prefetch_tiles() {
  if constexpr (requires { Isa::kMatvecPrefetchTiles; }) return Isa::kMatvecPrefetchTiles;
  return 1;
}
// The prefetch a tile of T tokens issues for address a.
template <class Isa, int T>
inline void tile_prefetch(std::uintptr_t a) {
  if constexpr (T == 1 && requires { Isa::prefetch_matvec(a); }) {
    Isa::prefetch_matvec(a);
  } else {
    Isa::prefetch(a);
  }
}
template <class Isa, class Fmt>
constexpr int step_cols() {
  return vecs<Fmt>() * Isa::kLanes;
}

template <class Isa, class Fmt, int R, int T>
void tile(const Shape& m, std::int64_t r0, const float* const* xs, const float* const* bias,
          float* const* ys) {
  using V = typename Isa::V;
  constexpr int L = Isa::kLanes;
  constexpr int NV = vecs<Fmt>();
  constexpr int kStep = NV * L;
  const std::uint8_t* rows[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) rows[r] = m.payload + (r0 + r) * m.row_stride;

  if constexpr (!Fmt::kGrouped) {
    V part[R][T];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) part[r][t] = Isa::zero();
    for (std::int64_t s = 0; s < m.steps; ++s) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        V w[NV];
        if (m.tail != 0 && s == m.steps - 1) {
          Fmt::decode_tail(rows[r], s, m.tail, w);
        } else {
          Fmt::decode(rows[r], s, w);
        }
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t)
#pragma GCC unroll 16
          for (int v = 0; v < NV; ++v)
            part[r][t] = Isa::fma(w[v], Isa::load(xs[t] + s * kStep + v * L), part[r][t]);
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) ys[t][r0 + r] = Isa::hsum(part[r][t]);
    return;
  } else {
    constexpr int kScaleBlock = 16;
    // Groups in flight per pass: only the one-token tile takes more than one.
    constexpr int G = T == 1 ? matvec_groups<Isa>() : 1;
    static_assert(G >= 1 && kScaleBlock % G == 0);
    constexpr int kAhead = T == 1 ? matvec_prefetch_tiles<Isa>() : 1;
    V acc[R][T];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) acc[r][t] = Isa::zero();
    alignas(64) float sc[R][kScaleBlock];
    const std::int64_t group_bytes = Fmt::kStepBytes * m.steps_per_group;
    // NG groups g, g+1, ..., each its own partial sum per (row, token); then the partials go
    // into acc in group order. With NG > 1 every group must have all its steps (not the last,
    // short group of a row whose columns are not a multiple of the group).
    const auto pass = [&]<int NG>(std::int64_t g0, int gi) {
      const std::int64_t g = g0 + gi;
      V part[NG][R][T];
#pragma GCC unroll 16
      for (int k = 0; k < NG; ++k)
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) {
          V init = Isa::zero();
          if constexpr (Fmt::kOffset != 0) init = Isa::load(bias[t] + (g + k) * L);
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) part[k][r][t] = init;
        }
      const std::int64_t steps_here =
          NG > 1 ? m.steps_per_group : std::min(m.steps, (g + 1) * m.steps_per_group) - g * m.steps_per_group;
      // The same groups kAhead row tiles further on: the hardware prefetcher alone left the
      // single-thread lm_head matvec ~35 % slower (several interleaved row streams).
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        // An address, not a pointer into the payload: past the last tile it points nowhere,
        // which a prefetch tolerates.
        const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(rows[r]) +
                                     static_cast<std::uintptr_t>(kAhead * R * m.row_stride + g * group_bytes);
        for (std::int64_t b = 0; b < NG * group_bytes; b += 64) {
          tile_prefetch<Isa, T>(ahead + static_cast<std::uintptr_t>(b));
        }
      }
      for (std::int64_t sl = 0; sl < steps_here; ++sl) {
#pragma GCC unroll 16
        for (int k = 0; k < NG; ++k) {
          const std::int64_t s = (g + k) * m.steps_per_group + sl;
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) {
            V w[NV];
            Fmt::decode(rows[r], s, w);
#pragma GCC unroll 16
            for (int t = 0; t < T; ++t)
#pragma GCC unroll 16
              for (int v = 0; v < NV; ++v)
                part[k][r][t] = Isa::fma(w[v], Isa::load(xs[t] + s * kStep + v * L), part[k][r][t]);
          }
        }
      }
#pragma GCC unroll 16
      for (int k = 0; k < NG; ++k)
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const V scale = Isa::set1(sc[r][gi + k]);
#pragma GCC unroll 16
          for (int t = 0; t < T; ++t) acc[r][t] = Isa::fma(scale, part[k][r][t], acc[r][t]);
        }
    };
    for (std::int64_t g0 = 0; g0 < m.n_groups; g0 += kScaleBlock) {
      const int gn = static_cast<int>(std::min<std::int64_t>(kScaleBlock, m.n_groups - g0));
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        Isa::decode_scales(m.scales + (r0 + r) * m.n_groups + g0, gn, sc[r]);
        if constexpr (scale_mul<Fmt>() != 1.0f) {
          for (int i = 0; i < gn; ++i) sc[r][i] *= scale_mul<Fmt>();
        }
      }
      int gi = 0;
      if constexpr (G > 1) {
        for (; gi + G <= gn && (g0 + gi + G) * m.steps_per_group <= m.steps; gi += G) {
          pass.template operator()<G>(g0, gi);
        }
      }
      for (; gi < gn; ++gi) pass.template operator()<1>(g0, gi);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) ys[t][r0 + r] = Isa::hsum(acc[r][t]);
  }
}

// Rows [begin, end) against T tokens: tiles of R rows, then single rows.
template <class Isa, class Fmt, int R, int T>
void rows_tiled(const Shape& m, std::int64_t begin, std::int64_t end, const float* const* xs,
                const float* const* bias, float* const* ys) {
  std::int64_t r = begin;
  for (; r + R <= end; r += R) tile<Isa, Fmt, R, T>(m, r, xs, bias, ys);
  for (; r < end; ++r) tile<Isa, Fmt, 1, T>(m, r, xs, bias, ys);
}

// nt (<= T) tokens over rows [begin, end): the tile shape compiled for exactly nt tokens; one
// token takes matvec's shape.
template <class Isa, class Fmt, int T>
void token_tile(int nt, const Shape& m, std::int64_t begin, std::int64_t end,
                const float* const* xs, const float* const* bias, float* const* ys) {
  if constexpr (T == 1) {
    rows_tiled<Isa, Fmt, Isa::kMatvecRows, 1>(m, begin, end, xs, bias, ys);
  } else {
    if (nt == T) {
      rows_tiled<Isa, Fmt, Isa::kTileRows, T>(m, begin, end, xs, bias, ys);
    } else {
      token_tile<Isa, Fmt, T - 1>(nt, m, begin, end, xs, bias, ys);
    }
  }
}

// Per-thread scratch for the prepared x (grows to the largest call, then stays).
inline float* scratch(std::size_t floats) {
  thread_local std::vector<float> buffer;
  constexpr std::size_t kAlign = 64 / sizeof(float);
  if (buffer.size() < floats + kAlign) buffer.resize(floats + kAlign);
  const auto address = reinterpret_cast<std::uintptr_t>(buffer.data());
  return buffer.data() + (kAlign - address / sizeof(float) % kAlign) % kAlign;
}

template <class Isa, class Fmt>
void run(const QuantMatrix& w, const float* x, std::int64_t x_stride, int n, float* y,
         std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end) {
  constexpr int L = Isa::kLanes;
  constexpr int NV = vecs<Fmt>();
  constexpr int kStep = NV * L;
  Shape m{};
  m.payload = w.payload;
  m.scales = w.scales;
  m.row_stride = w.row_stride;
  m.cols = w.cols;
  m.steps = (w.cols + kStep - 1) / kStep;
  m.tail = static_cast<int>(w.cols % kStep);
  if constexpr (Fmt::kGrouped) {
    m.n_groups = (w.cols + w.group - 1) / w.group;
    m.steps_per_group = w.group / kStep;
  } else {
    m.n_groups = 1;
    m.steps_per_group = m.steps;
  }

  // x as the tiles read it: zero-padded to whole steps, in the decoder's column order, the
  // per-lane group sums (times -kOffset) appended. The caller's x is used as is when nothing
  // needs changing.
  const bool prep = Fmt::kPaired || permuted<Fmt>() || Fmt::kOffset != 0 || m.tail != 0;
  const std::int64_t padded = m.steps * kStep;
  const std::int64_t per_token = padded + (Fmt::kOffset != 0 ? m.n_groups * L : 0);
  float* buffer = prep ? scratch(static_cast<std::size_t>(per_token) * n) : nullptr;
  if (prep) {
    for (int t = 0; t < n; ++t) {
      const float* xt = x + t * x_stride;
      float* out = buffer + t * per_token;
      if constexpr (permuted<Fmt>()) {
        const std::int64_t full = w.cols / kStep;
        for (std::int64_t s = 0; s < full; ++s) {
          for (int i = 0; i < kStep; ++i) out[s * kStep + i] = xt[s * kStep + Fmt::column(i)];
        }
        for (std::int64_t s = full; s < m.steps; ++s) {
          for (int i = 0; i < kStep; ++i) {
            const std::int64_t c = s * kStep + Fmt::column(i);
            out[s * kStep + i] = c < w.cols ? xt[c] : 0.0f;
          }
        }
      } else if constexpr (Fmt::kPaired) {
        // Q4 keeps column pairs in one byte (low nibble = even column): per step, x is stored as
        // [even columns | odd columns] so a vector of low nibbles multiplies contiguous x.
        const std::int64_t full = w.cols / kStep;
        for (std::int64_t s = 0; s < full; ++s) {
          for (int i = 0; i < L; ++i) {
            out[s * kStep + i] = xt[s * kStep + 2 * i];
            out[s * kStep + L + i] = xt[s * kStep + 2 * i + 1];
          }
        }
        for (std::int64_t s = full; s < m.steps; ++s) {
          for (int i = 0; i < L; ++i) {
            const std::int64_t even = s * kStep + 2 * i;
            out[s * kStep + i] = even < w.cols ? xt[even] : 0.0f;
            out[s * kStep + L + i] = even + 1 < w.cols ? xt[even + 1] : 0.0f;
          }
        }
      } else {
        std::copy(xt, xt + w.cols, out);
        std::fill(out + w.cols, out + padded, 0.0f);
      }
      if constexpr (Fmt::kOffset != 0) {
        float* bias = out + padded;
        for (std::int64_t g = 0; g < m.n_groups; ++g) {
          const std::int64_t s_end = std::min(m.steps, (g + 1) * m.steps_per_group);
          for (int i = 0; i < L; ++i) {
            float sum = 0.0f;
            for (std::int64_t s = g * m.steps_per_group; s < s_end; ++s) {
              for (int v = 0; v < NV; ++v) sum += out[s * kStep + v * L + i];
            }
            bias[g * L + i] = -static_cast<float>(Fmt::kOffset) * sum;
          }
        }
      }
    }
  }
  const auto x_of = [&](int t) { return prep ? buffer + t * per_token : x + t * x_stride; };
  const auto bias_of = [&](int t) { return prep ? buffer + t * per_token + padded : nullptr; };

  if (n == 1) {
    const float* xs[1] = {x_of(0)};
    const float* bias[1] = {bias_of(0)};
    float* ys[1] = {y};
    rows_tiled<Isa, Fmt, Isa::kMatvecRows, 1>(m, row_begin, row_end, xs, bias, ys);
    return;
  }
  // Blocks of rows small enough to stay in L2 while every token tile passes over them.
  constexpr int TT = Isa::kTileTokens;
  for (std::int64_t b0 = row_begin; b0 < row_end; b0 += Isa::kBlockRows) {
    const std::int64_t b1 = std::min<std::int64_t>(row_end, b0 + Isa::kBlockRows);
    for (int t0 = 0; t0 < n; t0 += TT) {
      const int nt = std::min(TT, n - t0);
      const float* xs[TT];
      const float* bias[TT];
      float* ys[TT];
      for (int t = 0; t < nt; ++t) {
        xs[t] = x_of(t0 + t);
        bias[t] = bias_of(t0 + t);
        ys[t] = y + (t0 + t) * y_stride;
      }
      token_tile<Isa, Fmt, TT>(nt, m, b0, b1, xs, bias, ys);
    }
  }
}

// The table entries: formats the tiles handle (group a multiple of the step), else generic.
template <class Isa>
void matmul(const QuantMatrix& w, const float* x, std::int64_t x_stride, int n, float* y,
            std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end) {
  if (n <= 0 || row_begin >= row_end) return;
  // A grouped format needs whole steps per group.
  const auto grouped_ok = [&]<class Fmt>() {
    return w.group > 0 && w.group % step_cols<Isa, Fmt>() == 0;
  };
  switch (w.fmt) {
    case kFmtF32:
      run<Isa, typename Isa::F32>(w, x, x_stride, n, y, y_stride, row_begin, row_end);
      return;
    case kFmtQ8G:
      if (grouped_ok.template operator()<typename Isa::Q8>()) {
        run<Isa, typename Isa::Q8>(w, x, x_stride, n, y, y_stride, row_begin, row_end);
        return;
      }
      // A decoder for groups narrower than Q8's step, where the Isa has one.
      if constexpr (requires { typename Isa::Q8Narrow; }) {
        if (grouped_ok.template operator()<typename Isa::Q8Narrow>()) {
          run<Isa, typename Isa::Q8Narrow>(w, x, x_stride, n, y, y_stride, row_begin, row_end);
          return;
        }
      }
      break;
    case kFmtQ4G:
      if (!grouped_ok.template operator()<typename Isa::Q4>()) break;
      run<Isa, typename Isa::Q4>(w, x, x_stride, n, y, y_stride, row_begin, row_end);
      return;
    case kFmtQ3G:
      if (!grouped_ok.template operator()<typename Isa::Q3>()) break;
      run<Isa, typename Isa::Q3>(w, x, x_stride, n, y, y_stride, row_begin, row_end);
      return;
    default:
      std::abort();  // the trunk loader refuses other formats
  }
  generic_impl::matmul(w, x, x_stride, n, y, y_stride, row_begin, row_end);
}

}  // namespace waste::kernels::detail::matmul_tiles

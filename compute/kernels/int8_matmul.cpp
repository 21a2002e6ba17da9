#include "compute/kernels/int8_matmul.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "compute/kernels/kernel_impl.hpp"
#include "shared/fp16.hpp"

namespace waste::kernels {

void quantize_acts(const float* x, std::int64_t x_stride, int n, std::int64_t cols, Int8Acts& out) {
  const int groups = int(cols / kInt8Group);
  out.cols = cols;
  out.groups = groups;
  out.n = n;
  out.q.resize(std::size_t(n) * std::size_t(cols));
  out.scale.resize(std::size_t(n) * std::size_t(groups));
  out.sum.resize(std::size_t(n) * std::size_t(groups));
  for (int t = 0; t < n; ++t) {
    const float* xt = x + std::int64_t(t) * x_stride;
    for (int g = 0; g < groups; ++g) {
      const float* xg = xt + std::int64_t(g) * kInt8Group;
      float amax = 0.0f;
      for (int c = 0; c < kInt8Group; ++c) amax = std::max(amax, std::fabs(xg[c]));
      std::int8_t* qg = out.q.data() + std::size_t(t) * std::size_t(cols) + std::size_t(g) * kInt8Group;
      const std::size_t at = std::size_t(t) * std::size_t(groups) + std::size_t(g);
      if (!(amax > 0.0f) || !std::isfinite(amax)) {  // all zero (or not finite: let the f32 path's NaN show)
        std::fill(qg, qg + kInt8Group, std::int8_t{0});
        out.scale[at] = amax > 0.0f ? amax : 0.0f;
        out.sum[at] = 0;
        continue;
      }
      const float inv = 127.0f / amax;
      std::int32_t sum = 0;
      for (int c = 0; c < kInt8Group; ++c) {
        const int v = std::clamp(int(std::nearbyint(xg[c] * inv)), -127, 127);
        qg[c] = std::int8_t(v);
        sum += v;
      }
      out.scale[at] = amax / 127.0f;
      out.sum[at] = sum;
    }
  }
}

bool int8_matmul_supports(const QuantMatrix& w) {
  const bool q6p = w.fmt == kFmtQ6P && w.row_stride == w.cols / kInt8Group * kQ6PGroupBytes;
  return (w.fmt == detail::kFmtQ4G || w.fmt == detail::kFmtQ8G || q6p) && w.group == kInt8Group &&
         w.cols % kInt8Group == 0 && w.scales != nullptr;
}

void matmul_i8_generic(const QuantMatrix& w, const Int8Acts& a, float* y, std::int64_t y_stride,
                       std::int64_t row_begin, std::int64_t row_end) {
  const int groups = a.groups;
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const std::uint8_t* p = w.payload + r * w.row_stride;
    const std::uint16_t* s = w.scales + r * groups;
    for (int t = 0; t < a.n; ++t) {
      const std::int8_t* xq = a.q.data() + std::size_t(t) * std::size_t(a.cols);
      float acc = 0.0f;
      for (int g = 0; g < groups; ++g) {
        std::int32_t dot = 0;
        const std::size_t at = std::size_t(t) * std::size_t(groups) + std::size_t(g);
        const float both = fp16_to_f32(s[g]) * a.scale[at];
        if (w.fmt == detail::kFmtQ8G) {
          const auto* q8 = reinterpret_cast<const std::int8_t*>(p);
          for (int c = g * kInt8Group; c < (g + 1) * kInt8Group; ++c) dot += std::int32_t(q8[c]) * std::int32_t(xq[c]);
          acc = std::fma(float(dot), both, acc);
          continue;
        }
        if (w.fmt == kFmtQ6P) {
          const std::uint8_t* pg = p + q6p_low_offset(g);
          const std::uint8_t* ph = p + q6p_planes_offset(groups, g);
          for (int c = 0; c < kInt8Group; ++c) {
            const int i = c >> 1;
            const int low = (c & 1) ? (pg[i] >> 4) : (pg[i] & 15);
            const int high = (ph[16 * (c & 1) + (i & 15)] >> (2 * (i >> 4))) & 3;
            dot += (low | high << 4) * std::int32_t(xq[g * kInt8Group + c]);
          }
          acc = std::fma(float(dot) + float(-32 * a.sum[at]), both, acc);
          continue;
        }
        for (int c = g * kInt8Group; c < (g + 1) * kInt8Group; ++c) {
          const int q = (c & 1) ? (p[c >> 1] >> 4) : (p[c >> 1] & 15);
          dot += q * std::int32_t(xq[c]);
        }
        acc = std::fma(float(dot) + float(-8 * a.sum[at]), both, acc);
      }
      y[std::int64_t(t) * y_stride + r] = acc;
    }
  }
}

namespace {

MatmulI8Fn choose() {
#if defined(__x86_64__)
  const std::string_view isa = active().isa;
  if ((isa == "avx512" || isa == "avx512vbmi") && __builtin_cpu_supports("avx512vnni")) {
    return detail::matmul_i8_avx512vnni;
  }
#endif
  return matmul_i8_generic;
}

}  // namespace

MatmulI8Fn matmul_i8() {
  static const MatmulI8Fn fn = choose();
  return fn;
}

bool matmul_i8_is_vector() { return matmul_i8() != matmul_i8_generic; }

}  // namespace waste::kernels

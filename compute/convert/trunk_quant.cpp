#include "compute/convert/trunk_quant.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "shared/fp16.hpp"

namespace waste::convert {

TensorFormat trunk_format(std::string_view name, const std::vector<std::int64_t>& shape, int trunk_bits) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  if (shape.size() <= 1 || n < kSmallTensorElements) return TensorFormat::f32;
  if (name.find("embed_tokens") != std::string_view::npos || name.find("lm_head") != std::string_view::npos) {
    return TensorFormat::q8g;
  }
  // GLM's mHC projections (model.layers.N.hc_attn_fn / hc_ffn_fn): their 24 outputs decide how the
  // residual streams mix for a whole layer, so they stay at 8 bits as the public engine keeps them.
  if (name.find(".hc_") != std::string_view::npos && name.ends_with("_fn")) return TensorFormat::q8g;
  return trunk_bits == 8 ? TensorFormat::q8g : TensorFormat::q4g;
}

void quantize_row(TensorFormat fmt, std::span<const float> row, std::span<std::byte> payload,
                  std::span<std::uint16_t> scales) {
  std::memset(payload.data(), 0, payload.size());
  auto* p = reinterpret_cast<std::uint8_t*>(payload.data());
  const std::size_t n = row.size();
  const int qmax = fmt == TensorFormat::q8g ? 127 : 7;
  const int qmin = fmt == TensorFormat::q8g ? -127 : -8;
  for (std::size_t g = 0; g < scales.size(); ++g) {
    const std::size_t b = g * 128, e = std::min(n, b + 128);
    float amax = 0.0f;
    for (std::size_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(row[i]));
    const float s = std::max(amax, 1e-8f) / float(qmax);
    scales[g] = f32_to_fp16(s);
    for (std::size_t i = b; i < e; ++i) {
      const int q = int(std::clamp(std::nearbyint(row[i] / s), float(qmin), float(qmax)));  // half to even
      if (fmt == TensorFormat::q8g) {
        p[i] = std::uint8_t(std::int8_t(q));
      } else {
        p[i >> 1] |= std::uint8_t((q + 8) << ((i & 1) * 4));  // even element: low nibble
      }
    }
  }
}

}  // namespace waste::convert

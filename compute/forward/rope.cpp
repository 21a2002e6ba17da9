#include "compute/forward/rope.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace waste::forward {
namespace {

// The pair index whose wavelength makes `rotations` turns over the original context.
double correction_dim(double rotations, int dim, double base, int original_max_pos) {
  return dim * std::log(double(original_max_pos) / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

YarnRange yarn_range(const RopeConfig& r, int rope_dim) {
  double low = correction_dim(r.beta_fast, rope_dim, r.theta, r.original_max_pos);
  double high = correction_dim(r.beta_slow, rope_dim, r.theta, r.original_max_pos);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(rope_dim - 1));
  if (low == high) high += 0.001;  // the official ramp's guard against a zero-width range
  return {low, high};
}

void rope_inv_freq(const RopeConfig& r, int rope_dim, double* out) {
  const int pairs = rope_dim / 2;
  for (int i = 0; i < pairs; ++i) out[i] = std::pow(r.theta, -2.0 * i / double(rope_dim));
  if (!r.yarn || r.factor <= 1.0) return;
  const YarnRange range = yarn_range(r, rope_dim);
  for (int i = 0; i < pairs; ++i) {
    const double ramp = std::clamp((i - range.low) / (range.high - range.low), 0.0, 1.0);
    out[i] = out[i] * (1.0 - ramp) + out[i] / r.factor * ramp;
  }
}

void rope_angles(const double* inv_freq, int pairs, int pos, float* cos_out, float* sin_out) {
  for (int i = 0; i < pairs; ++i) {
    const double phi = double(pos) * inv_freq[i];
    cos_out[i] = float(std::cos(phi));
    sin_out[i] = float(std::sin(phi));
  }
}

void rope_rotate(float* x, int pairs, const float* cos_in, const float* sin_in) {
  for (int i = 0; i < pairs; ++i) {
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * cos_in[i] - b * sin_in[i];
    x[2 * i + 1] = a * sin_in[i] + b * cos_in[i];
  }
}

float mla_softmax_scale(const ModelConfig& c) {
  const double m = c.rope.attention_mscale();
  const float plain = 1.0f / std::sqrt(float(c.qk_nope + c.qk_rope));  // NoPE models: the v0 value, bit for bit
  return m == 1.0 ? plain : float(m * m / std::sqrt(double(c.qk_nope + c.qk_rope)));
}

}  // namespace waste::forward

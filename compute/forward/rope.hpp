// Rotary embedding of the MLA qk_rope dims, DeepSeek-V3's way (docs/design/deepseek.md):
// consecutive pairs (x[2i], x[2i+1]) rotated as one complex number by pos * theta'_i, where
// theta'_i = rope_theta^(-2i/d) blended with theta_i / factor by YaRN's linear ramp.
// Angles are formed in double (pos * theta' reaches 1e5 rad at long contexts, where an f32
// product is off by ~1e-2 rad); the rotation itself is f32, as the rest of MLA.
#pragma once

#include "shared/container/model_config.hpp"

namespace waste::forward {

// YaRN's correction range [low, high] of pair indices (official find_correction_range): pairs
// below low keep theta_i, pairs above high get theta_i / factor.
struct YarnRange {
  double low = 0.0, high = 0.0;
};
YarnRange yarn_range(const RopeConfig& rope, int rope_dim);

// theta'_i for i < rope_dim / 2 into out (rope_dim / 2 doubles).
void rope_inv_freq(const RopeConfig& rope, int rope_dim, double* out);

// cos/sin of pos * inv_freq[i] for i < pairs.
void rope_angles(const double* inv_freq, int pairs, int pos, float* cos_out, float* sin_out);

// x[2i], x[2i+1] <- rotation by angle i, for i < pairs (in place).
void rope_rotate(float* x, int pairs, const float* cos_in, const float* sin_in);

// The MLA softmax scale: m^2 / sqrt(qk_nope + qk_rope), m = YaRN's mscale (1 without YaRN).
float mla_softmax_scale(const ModelConfig& c);

}  // namespace waste::forward

// Element-wise pieces of the tower: the two GELUs (the encoder MLP uses the tanh form, the
// projector the exact erf form; both are called "gelu" in the release config) and the 2-D
// rotary embedding.
#pragma once

#include <cmath>

namespace waste::vision {

inline float gelu_tanh(float x) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(kC * (x + 0.044715f * x * x * x)));
}

inline float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }

// Rotate the first `heads` x `head_dim` values of v for the patch at column x, row y.
// Pair j (values 2j, 2j+1) turns by x*f for even j and y*f for odd j, f = 10000^(-4*(j/2)/hd):
// width at even pairs, height at odd ones (what the weights were trained with).
void rope_2d(float* v, int heads, int head_dim, int x, int y);

}  // namespace waste::vision

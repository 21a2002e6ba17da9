// The gated FFN, one token or a chunk (ffn.hpp).
#include "compute/forward/ffn.hpp"

#include "compute/forward/fused_matvec.hpp"

namespace waste::forward {

void ffn_forward(const Exec& exec, const ModelConfig& c, const model::FfnWeights& w, const float* x, float* a,
                 float* b, float* out) {
  // A decode step's products go through matvec_tokens (one token), so they take the decode int8
  // rule as a decode row of a pass does; gate and up read the same x: one pool job.
  const std::int64_t hid = c.hidden, inter = w.gate.rows;
  if (w.gate.cols == w.up.cols) {
    const Projection gate_up[] = {{&w.gate, a, inter}, {&w.up, b, inter}};
    matvec_tokens_fused(exec, gate_up, x, hid, 1);
  } else {
    matvec_tokens(exec, w.gate, x, hid, 1, a, inter);
    matvec_tokens(exec, w.up, x, hid, 1, b, inter);
  }
  ffn_activation(c, a, b, int(inter), a);
  matvec_tokens(exec, w.down, a, inter, 1, out, hid);
}

void ffn_tokens(const Exec& exec, const ModelConfig& c, const model::FfnWeights& w, const float* x, int n, float* a,
                float* b, float* out) {
  const std::int64_t hid = c.hidden, inter = w.gate.rows;
  if (w.gate.cols == w.up.cols) {  // one pool job (and one quantised x) for both, as ffn_forward
    const Projection gate_up[] = {{&w.gate, a, inter}, {&w.up, b, inter}};
    matvec_tokens_fused(exec, gate_up, x, hid, n);
  } else {
    matvec_tokens(exec, w.gate, x, hid, n, a, inter);
    matvec_tokens(exec, w.up, x, hid, n, b, inter);
  }
  for (int t = 0; t < n; ++t) ffn_activation(c, a + t * inter, b + t * inter, int(inter), a + t * inter);
  matvec_tokens(exec, w.down, a, inter, n, out, hid);
}

}  // namespace waste::forward

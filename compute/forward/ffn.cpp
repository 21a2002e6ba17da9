// The gated FFN, one token or a chunk (ffn.hpp).
#include "compute/forward/ffn.hpp"

namespace waste::forward {

void ffn_forward(const Exec& exec, const ModelConfig& c, const model::FfnWeights& w, const float* x, float* a,
                 float* b, float* out) {
  matvec(exec, w.gate, x, a);
  matvec(exec, w.up, x, b);
  ffn_activation(c, a, b, int(w.gate.rows), a);
  matvec(exec, w.down, a, out);
}

void ffn_tokens(const Exec& exec, const ModelConfig& c, const model::FfnWeights& w, const float* x, int n, float* a,
                float* b, float* out) {
  const std::int64_t hid = c.hidden, inter = w.gate.rows;
  matvec_tokens(exec, w.gate, x, hid, n, a, inter);
  matvec_tokens(exec, w.up, x, hid, n, b, inter);
  for (int t = 0; t < n; ++t) ffn_activation(c, a + t * inter, b + t * inter, int(inter), a + t * inter);
  matvec_tokens(exec, w.down, a, inter, n, out, hid);
}

}  // namespace waste::forward

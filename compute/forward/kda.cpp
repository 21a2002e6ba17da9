// Kimi Delta Attention, recurrent form, one token (waste-v0-reference.md §3.4).
#include <algorithm>
#include <cmath>

#include "compute/forward/forward.hpp"

namespace waste::forward {

void KdaScratch::resize(const ModelConfig& c) {
  const std::size_t C = std::size_t(c.kda_channels());
  q.assign(C, 0.0f);
  k.assign(C, 0.0f);
  v.assign(C, 0.0f);
  low.assign(std::size_t(c.kda_dim), 0.0f);
  g.assign(C, 0.0f);
  gate.assign(C, 0.0f);
  beta.assign(std::size_t(c.kda_heads), 0.0f);
  o.assign(C, 0.0f);
}

namespace {

// Causal depthwise conv over the last K samples (ring holds the K-1 previous pre-conv values,
// oldest first; tap K-1 weighs the newest), then SiLU. Updates the ring in place.
void short_conv_silu(float* p, float* ring, const float* taps, int C, int K) {
  const int R = K - 1;
  for (int c = 0; c < C; ++c) {
    float* r = ring + std::int64_t(c) * R;
    const float* w = taps + std::int64_t(c) * K;
    float y = 0.0f;
    for (int j = 0; j < R; ++j) y += r[j] * w[j];
    y += p[c] * w[R];
    for (int j = 0; j + 1 < R; ++j) r[j] = r[j + 1];
    if (R > 0) r[R - 1] = p[c];
    p[c] = y / (1.0f + std::exp(-y));
  }
}

}  // namespace

void kda_forward(const Exec& exec, const ModelConfig& c, const model::KdaWeights& w, const float* x,
                 model::RunState& state, int layer, KdaScratch& s, float* out) {
  const int H = c.kda_heads, D = c.kda_dim, C = c.kda_channels(), K = c.conv_k;

  // q, k, v = SiLU(conv(W x))
  matvec(exec, w.q_proj, x, s.q.data());
  matvec(exec, w.k_proj, x, s.k.data());
  matvec(exec, w.v_proj, x, s.v.data());
  short_conv_silu(s.q.data(), state.conv_ring(layer, model::ConvRing::q).data(), w.q_conv.data(), C, K);
  short_conv_silu(s.k.data(), state.conv_ring(layer, model::ConvRing::k).data(), w.k_conv.data(), C, K);
  short_conv_silu(s.v.data(), state.conv_ring(layer, model::ConvRing::v).data(), w.v_conv.data(), C, K);

  // z = f_b(f_a x) + dt_bias; g = -exp(A_log_h) softplus(z)  or  lb * sigmoid(exp(A_log_h) z)
  matvec(exec, w.f_a, x, s.low.data());
  matvec(exec, w.f_b, s.low.data(), s.g.data());
  const bool bounded = c.gate_lower_bound < 0.0f;
  for (int h = 0; h < H; ++h) {
    const float a = std::exp(w.a_log[h]);
    for (int i = 0; i < D; ++i) {
      const int ch = h * D + i;
      const float z = s.g[ch] + w.dt_bias[ch];
      s.g[ch] = bounded ? c.gate_lower_bound * sigmoid(a * z) : -a * softplus(z);
    }
  }

  // beta_h = sigmoid(b_proj x)
  matvec(exec, w.b_proj, x, s.beta.data());
  for (float& b : s.beta) b = sigmoid(b);

  // Output gate: g_b(g_a x) (Kimi-Linear) or g_proj x (K3).
  if (c.full_rank_gate) {
    matvec(exec, w.g_proj, x, s.gate.data());
  } else {
    matvec(exec, w.g_a, x, s.low.data());
    matvec(exec, w.g_b, s.low.data(), s.gate.data());
  }

  // Per head: L2-normalise q (scaled by D^-1/2) and k, delta-rule step, gated RMSNorm.
  float* S_all = state.kda_state(layer).data();
  const float q_scale = 1.0f / std::sqrt(float(D));
  const float eps = c.rms_eps;
  const auto* kt = &exec.kernels;
  exec.pool.parallel_for(H, 1, [&](std::int64_t h_begin, std::int64_t h_end) {
    for (std::int64_t h = h_begin; h < h_end; ++h) {
      float* q = s.q.data() + h * D;
      float* k = s.k.data() + h * D;
      float qq = 0.0f, kk = 0.0f;
      for (int i = 0; i < D; ++i) {
        qq += q[i] * q[i];
        kk += k[i] * k[i];
      }
      const float q_inv = 1.0f / std::sqrt(qq + 1e-12f);
      const float k_inv = 1.0f / std::sqrt(kk + 1e-12f);
      for (int i = 0; i < D; ++i) {
        q[i] = q[i] * q_inv * q_scale;
        k[i] = k[i] * k_inv;
      }
      float* o = s.o.data() + h * D;
      kt->kda_head_step(S_all + h * std::int64_t(D) * D, q, k, s.v.data() + h * D, s.g.data() + h * D,
                        s.beta[h], D, o);
      rms_norm(o, w.o_norm.data(), D, eps, o);
      const float* gate = s.gate.data() + h * D;
      for (int j = 0; j < D; ++j) o[j] *= sigmoid(gate[j]);
    }
  });

  matvec(exec, w.o_proj, s.o.data(), out);
}

}  // namespace waste::forward

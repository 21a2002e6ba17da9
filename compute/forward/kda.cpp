// Kimi Delta Attention, recurrent form (waste-v0-reference.md §3.4), for a run of consecutive
// tokens: one token in decode, a prefill chunk otherwise. The projections take every token at
// once (each weight read once per chunk); the conv and the delta rule walk the tokens in order,
// one head at a time, so a head's state stays in cache for the whole chunk.
#include <algorithm>
#include <cmath>

#include "compute/forward/fused_matvec.hpp"
#include "compute/forward/kda.hpp"

namespace waste::forward {
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

// The projections over every token at once, then per head the tokens in order, each against
// the state `state_of(t)` returns (one state for a prefill chunk, one per token in a batch).
template <class StateOf>
void kda_run(const Exec& exec, const ModelConfig& c, const model::KdaWeights& w, const float* x, int n_tokens,
             StateOf state_of, int layer, KdaScratch& s, float* out) {
  const int H = c.kda_heads, D = c.kda_dim, C = c.kda_channels(), K = c.conv_k, n = n_tokens;
  const std::int64_t hid = c.hidden;

  // q, k, v = W x (conv and SiLU per head below), f_a x, b_proj x (sigmoid per head below): one
  // pool job, as they all read x.
  const Projection from_x[] = {{&w.q_proj, s.q.data(), C},
                               {&w.k_proj, s.k.data(), C},
                               {&w.v_proj, s.v.data(), C},
                               {&w.f_a, s.low.data(), D},
                               {&w.b_proj, s.beta.data(), H}};
  matvec_tokens_fused(exec, from_x, x, hid, n);

  // z = f_b(f_a x) (dt_bias and the decay form per head below)
  matvec_tokens(exec, w.f_b, s.low.data(), D, n, s.g.data(), C);

  // Output gate: g_b(g_a x) (Kimi-Linear) or g_proj x (K3).
  if (c.full_rank_gate) {
    matvec_tokens(exec, w.g_proj, x, hid, n, s.gate.data(), C);
  } else {
    matvec_tokens(exec, w.g_a, x, hid, n, s.low.data(), D);
    matvec_tokens(exec, w.g_b, s.low.data(), D, n, s.gate.data(), C);
  }

  // Per head, token after token: conv + SiLU, decay gate, beta, L2-normalised q (scaled by
  // D^-1/2) and k, delta-rule step, gated RMSNorm. Channels of head h are h*D..h*D+D-1, so its
  // conv rings, state and gate slices belong to it alone.
  const std::int64_t ring_stride = std::int64_t(D) * std::max(K - 1, 0);
  const float q_scale = 1.0f / std::sqrt(float(D));
  const float eps = c.rms_eps;
  const bool bounded = c.gate_lower_bound < 0.0f;
  const auto* kt = &exec.kernels;
  exec.pool.parallel_for(H, 1, [&](std::int64_t h_begin, std::int64_t h_end) {
    for (std::int64_t h = h_begin; h < h_end; ++h) {
      const std::int64_t ch0 = h * D;
      const float a = std::exp(w.a_log[std::size_t(h)]);
      for (int t = 0; t < n; ++t) {
        model::RunState& state = *state_of(t);
        float* S = state.kda_state(layer).data() + h * std::int64_t(D) * D;
        float* rings[3] = {state.conv_ring(layer, model::ConvRing::q).data(),
                           state.conv_ring(layer, model::ConvRing::k).data(),
                           state.conv_ring(layer, model::ConvRing::v).data()};
        const std::int64_t row = std::int64_t(t) * C + ch0;
        float* q = s.q.data() + row;
        float* k = s.k.data() + row;
        float* v = s.v.data() + row;
        // q, k, v = SiLU(conv(.))
        short_conv_silu(q, rings[0] + h * ring_stride, w.q_conv.data() + ch0 * K, D, K);
        short_conv_silu(k, rings[1] + h * ring_stride, w.k_conv.data() + ch0 * K, D, K);
        short_conv_silu(v, rings[2] + h * ring_stride, w.v_conv.data() + ch0 * K, D, K);

        // g = -exp(A_log_h) softplus(z + dt_bias)  or  lb * sigmoid(exp(A_log_h) (z + dt_bias))
        float* g = s.g.data() + row;
        for (int i = 0; i < D; ++i) {
          const float z = g[i] + w.dt_bias[std::size_t(ch0 + i)];
          g[i] = bounded ? c.gate_lower_bound * sigmoid(a * z) : -a * softplus(z);
        }
        // beta_h = sigmoid(b_proj x)
        const float beta = sigmoid(s.beta[std::size_t(std::int64_t(t) * H + h)]);

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
        float* o = s.o.data() + row;
        kt->kda_head_step(S, q, k, v, g, beta, D, o);
        rms_norm(o, w.o_norm.data(), D, eps, o);
        const float* gate = s.gate.data() + row;
        for (int j = 0; j < D; ++j) o[j] *= sigmoid(gate[j]);
      }
    }
  });

  matvec_tokens(exec, w.o_proj, s.o.data(), C, n, out, hid);
}

}  // namespace

void kda_forward(const Exec& exec, const ModelConfig& c, const model::KdaWeights& w, const float* x, int n_tokens,
                 model::RunState& state, int layer, KdaScratch& s, float* out) {
  kda_run(exec, c, w, x, n_tokens, [&](int) { return &state; }, layer, s, out);
}

void kda_forward(const Exec& exec, const ModelConfig& c, const model::KdaWeights& w, const float* x,
                 std::span<const TokenSeq> seqs, int layer, KdaScratch& s, float* out) {
  kda_run(exec, c, w, x, int(seqs.size()), [&](int t) { return seqs[std::size_t(t)].state; }, layer, s, out);
}

}  // namespace waste::forward

// Multi-head latent attention with kv_b_proj absorbed (waste-v0-reference.md §3.5), NoPE or
// with DeepSeek-V3's decoupled rotary on the qk_rope dims (docs/design/deepseek.md), for
// a run of consecutive tokens (one in decode, a prefill chunk otherwise). The cache holds
// [c, k_r] per token; keys and values are never expanded per head. The projections take every
// token at once; each head dequantises its kv_b rows once for all the tokens.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compute/forward/mla.hpp"
#include "compute/forward/rope.hpp"

namespace waste::forward {
namespace {

// Token t's latent cache and position come from `slot_of(t)` (one cache at pos0 + t for a
// prefill chunk; each token's own sequence in a batch).
struct TokenCache {
  float* cache;
  int pos;
};

template <class SlotOf>
void mla_run(const Exec& exec, const ModelConfig& c, const model::MlaWeights& w, const float* x, int n_tokens,
             SlotOf slot_of, MlaScratch& s, float* out, const MlaSelect* select) {
  const int nh = c.n_heads, nope = c.qk_nope, rope = c.qk_rope, qd = nope + rope;
  const int lora = c.kv_lora, vd = c.v_head, width = lora + rope, n = n_tokens;
  const std::int64_t hid = c.hidden, q_width = std::int64_t(nh) * qd, o_width = std::int64_t(nh) * vd;

  // q = q_proj x  or  q_b(rms(q_a x)); layout [t][nh][nope | rope]
  if (c.q_lora > 0) {
    matvec_tokens(exec, w.q_a, x, hid, n, s.q_a.data(), c.q_lora);
    for (int t = 0; t < n; ++t) {
      float* qa = s.q_a.data() + std::int64_t(t) * c.q_lora;
      rms_norm(qa, w.q_a_norm.data(), c.q_lora, c.rms_eps, qa);
    }
    matvec_tokens(exec, w.q_b, s.q_a.data(), c.q_lora, n, s.q.data(), q_width);
  } else {
    matvec_tokens(exec, w.q_proj, x, hid, n, s.q.data(), q_width);
  }
  // Sparse attention: the positions each token attends, chosen from the q_lora residual.
  const MlaPositions picked = select != nullptr ? (*select)(c.q_lora > 0 ? s.q_a.data() : nullptr, n) : MlaPositions{};

  // [c, k_r] = [rms(ckv[:lora]), ckv[lora:]] into the token's cache slot; a token reads only
  // its own sequence's slots up to its position, so every token's slot can be written first.
  // With rotary, q_rope of every head and the shared k_r are rotated at the token's position
  // here, k_r once before it is cached (c carries no position, so kv_b stays absorbable).
  matvec_tokens(exec, w.kv_a, x, hid, n, s.ckv.data(), width);
  const int pairs = c.rope.enabled ? rope / 2 : 0;
  double inv_freq[kMaxRopeDim / 2];
  float cos_t[kMaxRopeDim / 2], sin_t[kMaxRopeDim / 2];
  if (pairs > 0) rope_inv_freq(c.rope, rope, inv_freq);
  for (int t = 0; t < n; ++t) {
    const float* ckv = s.ckv.data() + std::int64_t(t) * width;
    const TokenCache tc = slot_of(t);
    float* slot = tc.cache + std::int64_t(tc.pos) * width;
    rms_norm(ckv, w.kv_a_norm.data(), lora, c.rms_eps, slot);
    std::memcpy(slot + lora, ckv + lora, std::size_t(rope) * sizeof(float));
    if (pairs > 0) {
      rope_angles(inv_freq, pairs, tc.pos, cos_t, sin_t);
      rope_rotate(slot + lora, pairs, cos_t, sin_t);
      float* q_t = s.q.data() + std::int64_t(t) * q_width;
      for (int h = 0; h < nh; ++h) rope_rotate(q_t + std::int64_t(h) * qd + nope, pairs, cos_t, sin_t);
    }
  }

  const float scale = mla_softmax_scale(c);
  const auto* kt = &exec.kernels;
  // q~_t = W_kb,h^T q_nope,t per head: the dequantised K rows, row i weighted by q_nope,t[i] and
  // summed in row order (kernels::weighted_rows: every ISA the same bits; per token the order alone).
  exec.pool.parallel_for(nh, 1, [&](std::int64_t h_begin, std::int64_t h_end) {
    for (std::int64_t h = h_begin; h < h_end; ++h) {
      float* q_tilde_h = s.q_tilde.data() + h * n * std::int64_t(lora);  // [t][lora]
      std::fill(q_tilde_h, q_tilde_h + std::int64_t(n) * lora, 0.0f);
      kernels::weighted_rows(*kt, w.kv_b, h * std::int64_t(nope + vd), nope, s.q.data() + h * qd, q_width, n,
                             q_tilde_h, lora);
    }
  });

  for (int t = 0; t < n; ++t) {
    const TokenCache tc = slot_of(t);
    const float* latent_cache = tc.cache;
    const int n_kv = tc.pos + 1;
    // The attended slots, ascending: k-th = sel[k] (k < m), or every slot 0..pos (sel == nullptr).
    const int* sel = picked.positions != nullptr ? picked.positions + std::int64_t(t) * picked.stride : nullptr;
    const int m = sel != nullptr ? picked.counts[t] : n_kv;
    const auto cache_rows = [&](int first_col, int cols) {
      return kernels::QuantMatrix{reinterpret_cast<const std::uint8_t*>(latent_cache + first_col), nullptr,
                                  n_kv, cols, std::int64_t(width) * std::int64_t(sizeof(float)), 128, 0};
    };
    // s_{h,u} = (q~_h . c_u + q_rope,h . k_r,u) / sqrt(qd). The cache is the matrix and the heads
    // are its tokens: matmul keeps a block of cache rows in L2 across every head, so the cache is
    // read once per token rather than once per head (at position 4,000 that was 32 x 9 MB per
    // layer), with each head's scores the bits of its own matvec.
    const float* q_tilde_t = s.q_tilde.data() + std::int64_t(t) * lora;  // head h at + h * n * lora
    const float* q_rope_t = s.q.data() + std::int64_t(t) * q_width + nope;  // head h at + h * qd
    exec.pool.parallel_for(m, 64, [&](std::int64_t u_begin, std::int64_t u_end) {
      if (sel == nullptr) {
        kt->matmul(cache_rows(0, lora), q_tilde_t, std::int64_t(n) * lora, nh, s.scores.data(), s.ctx_tokens,
                   u_begin, u_end);
        if (rope > 0) {
          kt->matmul(cache_rows(lora, rope), q_rope_t, qd, nh, s.dot_r.data(), s.ctx_tokens, u_begin, u_end);
        }
        return;
      }
      // Selected slots k in [u_begin, u_end): one matmul per run of consecutive cache rows, its
      // scores at k (the kernel gives each row the same bits for any row range).
      for (std::int64_t a = u_begin; a < u_end;) {
        std::int64_t b = a + 1;
        while (b < u_end && sel[b] == sel[b - 1] + 1) ++b;
        kt->matmul(model::row_slice(cache_rows(0, lora), sel[a], b - a), q_tilde_t, std::int64_t(n) * lora, nh,
                   s.scores.data() + a, s.ctx_tokens, 0, b - a);
        if (rope > 0) {
          kt->matmul(model::row_slice(cache_rows(lora, rope), sel[a], b - a), q_rope_t, qd, nh, s.dot_r.data() + a,
                     s.ctx_tokens, 0, b - a);
        }
        a = b;
      }
    });

    exec.pool.parallel_for(nh, 1, [&](std::int64_t h_begin, std::int64_t h_end) {
      for (std::int64_t h = h_begin; h < h_end; ++h) {  // softmax over the m attended slots
        float* scores = s.scores.data() + h * s.ctx_tokens;
        const float* dot_r = s.dot_r.data() + h * s.ctx_tokens;
        float max_score = -INFINITY;
        for (int k = 0; k < m; ++k) {
          scores[k] = (scores[k] + (rope > 0 ? dot_r[k] : 0.0f)) * scale;
          max_score = std::max(max_score, scores[k]);
        }
        float sum = 0.0f;
        for (int k = 0; k < m; ++k) {
          scores[k] = std::exp(scores[k] - max_score);
          sum += scores[k];
        }
        for (int k = 0; k < m; ++k) scores[k] /= sum;
        float* ctx = s.ctx_sum.data() + h * lora;
        std::fill(ctx, ctx + lora, 0.0f);
      }
      // c~_h = sum_u a_{h,u} c_u, u ascending for every (h, j) as a head alone would sum; the
      // cache is walked in blocks of rows that stay in L2 across this thread's heads.
      constexpr int kRowsPerBlock = 64;
      for (int k0 = 0; k0 < m; k0 += kRowsPerBlock) {
        const int k1 = std::min(m, k0 + kRowsPerBlock);
        for (std::int64_t h = h_begin; h < h_end; ++h) {
          const float* scores = s.scores.data() + h * s.ctx_tokens;
          float* ctx = s.ctx_sum.data() + h * lora;
          for (int k = k0; k < k1; ++k) {
            const float* cu = latent_cache + std::int64_t(sel != nullptr ? sel[k] : k) * width;
            const float a = scores[k];
            for (int j = 0; j < lora; ++j) ctx[j] += a * cu[j];
          }
        }
      }
      for (std::int64_t h = h_begin; h < h_end; ++h) {  // o_h = W_vb,h c~_h
        const kernels::QuantMatrix w_vb = model::row_slice(w.kv_b, h * std::int64_t(nope + vd) + nope, vd);
        kt->matvec(w_vb, s.ctx_sum.data() + h * lora, s.o.data() + std::int64_t(t) * o_width + h * vd, 0, vd);
      }
    });
  }

  // K3: o *= sigmoid(g_proj x)
  if (c.mla_output_gate) {
    matvec_tokens(exec, w.g_proj, x, hid, n, s.gate.data(), o_width);
    const std::size_t total = std::size_t(std::int64_t(n) * o_width);
    for (std::size_t i = 0; i < total; ++i) s.o[i] *= sigmoid(s.gate[i]);
  }
  matvec_tokens(exec, w.o_proj, s.o.data(), o_width, n, out, hid);
}

}  // namespace

void mla_forward(const Exec& exec, const ModelConfig& c, const model::MlaWeights& w, const float* x, int n_tokens,
                 int pos0, float* latent_cache, MlaScratch& s, float* out, const MlaSelect* select) {
  mla_run(exec, c, w, x, n_tokens, [&](int t) { return TokenCache{latent_cache, pos0 + t}; }, s, out, select);
}

void mla_forward(const Exec& exec, const ModelConfig& c, const model::MlaWeights& w, const float* x,
                 std::span<const TokenSeq> seqs, int layer, MlaScratch& s, float* out, const MlaSelect* select) {
  mla_run(
      exec, c, w, x, int(seqs.size()),
      [&](int t) {
        const TokenSeq& q = seqs[std::size_t(t)];
        return TokenCache{q.state->latent_cache(layer).data(), q.pos};
      },
      s, out, select);
}

}  // namespace waste::forward
